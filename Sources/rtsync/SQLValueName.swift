import RTSQLite

// SyncEngine names RTSQLite's value type too (its public typealias); this target imports both, so its own name
// settles which one an expression like `[SQLValue](…)` or `SQLValue.text(…)` means.
typealias SQLValue = RTSQLite.SQLValue
