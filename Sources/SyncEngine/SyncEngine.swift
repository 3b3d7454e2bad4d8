/// The primary database: change tracking, export, apply, merge.
public enum SyncEngineModule {}
