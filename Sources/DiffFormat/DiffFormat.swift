/// The diff file: KSUIDs, writer, defensive reader, validation and inspection.
public enum DiffFormatModule {}
