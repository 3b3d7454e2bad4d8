import RTSQLite

// The products name RTSQLite's value type too (SyncEngine's public typealias); this target imports both, so its own
// name settles which one an expression like `[SQLValue](…)` means.
typealias SQLValue = RTSQLite.SQLValue
