import RTSQLite

/// A value read from or bound to SQLite: integer, real, text, blob or null (the type rows, keys and conflict-log
/// values are given in). Defined in rtsync's internal SQLite wrapper; named here so apps reach it from the products.
/// (Declared in this module, it is also the one name SyncEngine's own code means.)
public typealias SQLValue = RTSQLite.SQLValue

/// An error SQLite returned: result code, extended code, message and the SQL it ran (bound values are not shown).
public typealias SQLiteError = RTSQLite.SQLiteError
