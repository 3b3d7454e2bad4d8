// `import SyncEngine` is enough for an app: the diff format's public types (KSUID, Clock, DiffReader, …) appear
// in SyncEngine's API and come with it.
@_exported import DiffFormat
