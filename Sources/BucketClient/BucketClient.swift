/// Object stores: S3 and local folder.
public enum BucketClientModule {}
