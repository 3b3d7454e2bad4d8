import DiffFormat
import Foundation
import RTSQLite

// MARK: - The merge rules, one row change at a time

extension Merger {
    /// Merges one row of the diff: rows new to this device take `insertNew`, every other the full merge.
    mutating func merge(_ row: DiffRow) throws {
        let plan = try plan(for: row.table.name)
        // A clock far ahead would win every merge until wall time caught up (and Int64.max would even beat
        // unexported local edits): such a diff comes from a badly skewed or hostile device.
        try noteClocks(row)
        if row.operation == .upsert, try insertNew(plan, row) { return }
        try mergeFully(plan.localized(row.change), plan: plan)
    }

    /// The plan of a carried table, made on first use.
    mutating func plan(for table: String) throws -> TablePlan {
        if let cachedPlan = plans[table] { return cachedPlan }
        guard let info = tracked[table] ?? tracked.values.first(where: { $0.table.name.lowercased() == table.lowercased() }),
              let remoteDef = reader.tables.first(where: { $0.name == table }) else {
            throw SyncEngineError.diffRejected(file: reader.url.path, reason: "table '\(table)' is neither in this database nor defined by the diff")
        }
        // A key column declared ANY keeps every value as given in a STRICT table (elsewhere ANY is NUMERIC affinity).
        let def = info.definition
        let anyKey = def.columns.contains { c in def.primaryKeyColumns.contains(c.name) && KeyAffinity.isAny(c.type) }
        let strict = anyKey && (try? db.scalar("SELECT strict FROM pragma_table_list WHERE schema = 'main' AND name = ?", [.text(def.name)]))??.int64 == 1
        let plan = TablePlan(info: info, remoteDef: remoteDef, abortsConflicts: try UniqueIndex.hasUniqueConflictClause(table: def.name, in: db), strict: strict)
        plans[table] = plan
        return plan
    }

    /// Merges one row change by the table's policy (its clocks already checked).
    mutating func mergeFully(_ incoming: RowChange, plan: TablePlan) throws {
        // Keys are matched as SQLite matches them: brought to the local columns' storage class first, so the
        // bookkeeping, the merge rules, shares and owner checks all see the key the row will have here.
        var change = incoming
        for (i, position) in plan.keyPositions.enumerated() {
            guard let position else { continue }
            change.values[position] = try normalizedKey(change.values[position], plan.keyAffinities[i], plan: plan, column: i)
        }
        let keyValues = plan.keyPositions.map { $0.map { change.values[$0] } ?? .null }
        let info = plan.info
        let remote = plan.remoteValues(change, snapshot: meta.kind.carriesState)
        let local = try localRow(info, keyValues: keyValues, plan: plan)
        let ctx = RowContext(plan: plan, remote: remote, change: change, keyValues: keyValues)
        // Rows this user shared read-only with the author may not be changed by the author's diffs.
        if readOnlyShares.contains(RowKey(info.table.id, local.key)) {
            let reason = "read-only share: user '\(meta.authorUser)' may not change rows shared with them"
            if change.operation == .delete { return try refuseDelete(ctx, local, reason: reason) }
            return try refuse(ctx, local, columns: ctx.changedColumns, reason: reason)
        }
        if change.operation == .delete {
            try mergeDelete(ctx, local)
        } else {
            try mergeUpsert(ctx, local)
        }
        // A row made here by this change (its first, or a new incarnation replacing the row here) takes every value
        // the change carries.
        if !plan.aside.isEmpty { try keepAside(ctx, key: local.key, created: local.values == nil || ctx.born(local)) }
    }

    /// A key value in the storage class the local key column gives it; rejects the diff when that would change it.
    mutating func normalizedKey(_ value: SQLValue, _ affinity: KeyAffinity, plan: TablePlan, column: Int) throws -> SQLValue {
        if affinity.isNatural(value) { return value }
        let realText = try cached("SELECT CAST(? AS TEXT)")
        let normalized = try affinity.normalize(value) { d in
            try realText.bind([.real(d)])
            defer { realText.reset() }
            _ = try realText.step()
            return realText.column(0).string ?? ""
        }
        guard let normalized else {
            let name = plan.info.definition.primaryKeyColumns[column]
            throw SyncEngineError.diffRejected(file: reader.url.path, reason: "key \(value.sqlLiteral.prefix(80)) of '\(plan.info.table.name)'.'\(name)' would change when stored in the local column (declared \(plan.info.definition.columns.first { $0.name == name }?.type ?? "without a type")), so it cannot be matched to a row here")
        }
        return normalized
    }

    /// Checks a row's clocks and notes the newest of the author's (`maxRemoteHLC`), as each row is merged.
    mutating func noteClocks(_ row: DiffRow) throws {
        try checkClock(row.clock, row.table.name)
        try checkClock(row.born, row.table.name)
        for clock in row.columnClocks.values { try checkClock(clock, row.table.name) }
    }

    mutating func checkClock(_ clock: Clock, _ table: String) throws {
        if clock.hlc.rawValue > clockLimit, let error = Merger.clockError(clock, table: table, limit: clockLimit, file: reader.url.path) { throw error }
        if clock.site == meta.authorSite { maxRemoteHLC = max(maxRemoteHLC, clock.hlc.rawValue) }
        maxAnyHLC = max(maxAnyHLC, clock.hlc.rawValue)
    }

    /// The rejection of a clock more than a day ahead of this device's (`limit`), or nil.
    static func clockError(_ clock: Clock, table: String, limit: Int64, file: String) -> SyncEngineError? {
        guard clock.hlc.rawValue > limit else { return nil }
        return .diffRejected(file: file, reason: "clock \(clock) of a row of '\(table)' is more than a day ahead of this device's clock")
    }

    /// The common case of a diff carrying rows this device has never seen: no local row, no tombstone or
    /// other bookkeeping for the key, no unexported local change. Every policy then inserts the whole row
    /// (owner-only only when the author owns it), so two statements do it: claiming the key in `rtsync_rows`
    /// (which fails when the key has any history here) and inserting the row (which does nothing when a row
    /// with the key exists). Values go from the diff file to the database as SQLite holds them, without
    /// Swift copies. Returns false, having changed nothing, when the row needs the full merge.
    mutating func insertNew(_ plan: TablePlan, _ row: DiffRow) throws -> Bool {
        let info = plan.info
        guard plan.fastInsert, let keyPositions = plan.fastKeyPositions else { return false }
        // A key in another storage class than the local column's is converted by the full merge.
        for (i, position) in keyPositions.enumerated() where !plan.keyAffinities[i].isNatural(row.value(position)) { return false }
        if let ownerPosition = plan.ownerPosition, !row.isText(ownerPosition, equalTo: meta.authorUser) { return false }
        // A state diff's row that lacks some of the carried columns (values another app version's columns kept
        // aside on its device, `writeStateDiff`) has a placeholder there: the full merge leaves those columns out.
        if meta.kind.carriesState, row.change.changedColumns != nil { return false }
        let tid = info.table.id
        if !pending.isEmpty || !readOnlyShares.isEmpty {
            let tk = RowKey(tid, try keyText(keyPositions.map { row.value($0) }, of: info.definition))
            if pending[tk] != nil || readOnlyShares.contains(tk) { return false }
        }
        let statements = try plan.fastStatements(db)
        // The key text is made by SQLite's quote(), as the capture triggers make it.
        let claim = statements.claim
        try claim.bind(.integer(tid), at: 1)
        try claim.bind(.integer(row.born.hlc.rawValue), at: 2)
        try claim.bind(.text(row.born.site), at: 3)
        for (i, position) in keyPositions.enumerated() { try row.bind(position, to: claim, at: 4 + i) }
        try claim.runBound()
        guard db.changes == 1 else { return false }
        let insert = statements.insert
        for (i, position) in plan.allPositions.enumerated() { try row.bind(position, to: insert, at: 1 + i) }
        var inserted = false
        do {
            try insert.runBound()
            inserted = db.changes == 1
        } catch let e as SQLiteError where e.isUniqueViolation {
            inserted = false
        }
        guard inserted else {
            // A row with this key exists here without bookkeeping, or another key holds a UNIQUE value.
            let unclaim = statements.unclaim
            try unclaim.bind(.integer(tid), at: 1)
            for (i, position) in keyPositions.enumerated() { try row.bind(position, to: unclaim, at: 2 + i) }
            try unclaim.runBound()
            return false
        }
        report.inserted += 1
        // Column clocks are kept only where they differ from the row's born clock.
        let needsClocks = !(row.columnClocks.isEmpty && row.clock == row.born)
        guard needsClocks || plan.hasDeleteActions else { return true }
        let change = plan.localized(row.change)
        let keyValues = keyPositions.map { change.values[$0] }
        let key = try keyText(keyValues, of: info.definition)
        let remote = plan.remoteValues(change)
        let r = RowContext(plan: plan, remote: remote, change: change, keyValues: keyValues)
        if needsClocks {
            try setColumnClocks(r, key, columns: r.changedColumns, clearFirst: true)
            try markUncarriedColumns(r, key)
        }
        if plan.hasDeleteActions {
            let local = LocalRow(key: key, hasMeta: true, values: nil, born: change.born, deleted: nil, clocks: [:], pending: nil, pendingClocks: [:])
            try applyDeleteActionsForDeletedParents(r, local, written: r.allColumns)
        }
        return true
    }

    /// Names and SQL of one table, worked out once per diff instead of once per row.
    final class TablePlan {
        let info: TrackedInfo
        let remoteDef: TableDefinition
        /// Incoming column names, lower-cased, in diff order; a renamed column under the name it has here.
        let remoteLower: [String]
        /// The incoming names (lower-cased) of columns renamed between app versions -> the local name.
        let renamedFrom: [String: String]
        /// Primary key columns, lower-cased, in key order.
        let keyLower: [String]
        /// Position of each primary key column in the incoming values.
        let keyPositions: [Int?]
        /// The affinity of each local primary key column, in key order.
        let keyAffinities: [KeyAffinity]
        /// Position in the incoming values of each of `allColumns`.
        let allPositions: [Int]
        /// Position in the incoming values of the owner column of an owner-only table.
        let ownerPosition: Int?
        /// Inserts `allColumns`, doing nothing when a row with the key exists.
        let insertNewSQL: String
        /// `keyPositions` when every key column is in the diff (always, for a diff that passed the schema check).
        let fastKeyPositions: [Int]?
        /// The statements of `insertNew`, compiled on first use.
        private var fast: FastStatements?

        /// Claiming a key, inserting the row, and releasing the claim when the row could not be inserted.
        struct FastStatements {
            let claim: Statement
            let insert: Statement
            let unclaim: Statement
        }

        /// The statements of `insertNew` (key text built in SQL from the bound key columns, as the triggers build it).
        func fastStatements(_ db: Connection) throws -> FastStatements {
            if let fast { return fast }
            let keyCount = keyLower.count
            let utf8 = try SyncDatabase.storesUTF8(db), numbers = SyncDatabase.numberKeys(info.definition)
            func key(from first: Int) -> String {
                (0..<keyCount).map { SyncDatabase.keyValueText("?\(first + $0)", utf8: utf8, numbers: $0 < numbers.count && numbers[$0]) }.joined(separator: " || ',' || ")
            }
            let made = FastStatements(
                claim: try db.prepare("INSERT INTO rtsync_rows(tid, pk, born_hlc, born_site, del_hlc, del_site) VALUES (?1, \(key(from: 4)), ?2, ?3, NULL, NULL) ON CONFLICT(tid, pk) DO NOTHING"),
                insert: try db.prepare(insertNewSQL),
                unclaim: try db.prepare("DELETE FROM rtsync_rows WHERE tid = ?1 AND pk = \(key(from: 2))"))
            fast = made
            return made
        }
        /// Whether rows new to this device may take `insertNew` (not when an owner-only diff lacks the owner column).
        let fastInsert: Bool
        /// Whether the table has foreign keys with ON DELETE SET NULL or CASCADE.
        let hasDeleteActions: Bool
        /// Every incoming column that exists locally, named as in the local table.
        let allColumns: [String]
        /// `allColumns` and the NOT NULL columns the diff lacks that take a declared value (`fillers`).
        let insertColumns: [String]
        /// Declared values of NOT NULL columns the diff lacks, by lower-cased name.
        let fillers: [String: SQLValue]
        /// Sets the columns the diff does not carry (an older app version's row) as a new row has them (declared default,
        /// the app's value for sync, or NULL), for a new incarnation that replaces a row here; nil when there are none.
        let resetMissingSQL: String?

        /// `UPDATE` setting `columns` as a new row has them (declared value for sync, declared default, or NULL for a
        /// nullable column without one; others are left), for the row with the bound key; nil when none can be set.
        static func resetSQL(_ columns: [ColumnDefinition], fillers: [String: SQLValue], table: String, whereKey: String, orAbort: String) -> String? {
            var resets: [String] = []
            for c in columns {
                if let v = fillers[c.name.lowercased()] {
                    resets.append(quoteIdentifier(c.name) + " = " + v.sqlLiteral)
                } else if let d = TableDefinition.safeDefault(c.defaultValue) {
                    resets.append(quoteIdentifier(c.name) + " = " + d)
                } else if c.defaultValue == nil && !c.notNull {
                    resets.append(quoteIdentifier(c.name) + " = NULL")
                }
            }
            return resets.isEmpty ? nil : "UPDATE" + orAbort + " " + table + " SET " + resets.joined(separator: ", ") + " WHERE " + whereKey
        }

        /// `resetSQL` for some local columns (by name) of this table.
        func resetSQL(_ names: [String]) -> String? {
            let wanted = Set(names.map { $0.lowercased() })
            return Self.resetSQL(info.definition.columns.filter { $0.primaryKey == 0 && wanted.contains($0.name.lowercased()) }, fillers: fillers,
                                 table: quoteIdentifier(info.definition.name), whereKey: whereKey, orAbort: orAbort)
        }
        /// NOT NULL columns without a default that the diff lacks and that have no declared value.
        let unplaceable: [String]
        /// Local column index by lower-cased name.
        let localIndex: [String: Int]
        /// Local column name by lower-cased name.
        let localName: [String: String]
        let selectSQL: String
        let insertAllSQL: String
        let deleteSQL: String
        let whereKey: String
        /// Incoming columns this table does not have (a newer app version's), kept aside: position and name.
        let aside: [(position: Int, name: String)]

        /// The incoming values of a change by lower-cased column name.
        /// The incoming values by lower-cased name. In a state diff (`snapshot`: `writeStateDiff`), a row with a
        /// `changed` list holds no value for the carried columns outside it (a newer app version's column its device
        /// kept no value of, a NULL placeholder in the file): those are left out, as columns the diff lacks are.
        func remoteValues(_ change: RowChange, snapshot: Bool = false) -> [String: SQLValue] {
            var remote: [String: SQLValue] = Dictionary(minimumCapacity: remoteLower.count)
            for (i, c) in remoteLower.enumerated() { remote[c] = change.values[i] }
            if snapshot, let changed = change.changedColumns {
                let held = Set(changed.map { (renamedFrom[$0.lowercased()] ?? $0).lowercased() })
                for c in remoteLower where !held.contains(c) && !keyLower.contains(c) { remote[c] = nil }
            }
            return remote
        }

        /// " OR ABORT" when the table gives a UNIQUE or PRIMARY KEY constraint a conflict clause of its own (REPLACE,
        /// IGNORE, …), which would otherwise settle a collision silently, by arrival order, where the merge settles it
        /// the same way on every device (`writeResolvingUnique`); else "", so that the app's triggers and NOT NULL
        /// clauses keep their own conflict handling (a statement's OR clause also governs the triggers it fires).
        let orAbort: String

        init(info: TrackedInfo, remoteDef: TableDefinition, abortsConflicts: Bool = false, strict: Bool = false) {
            self.info = info
            self.remoteDef = remoteDef
            orAbort = abortsConflicts ? " OR ABORT" : ""
            let def = info.definition
            let translated = SyncDatabase.translatedColumns(remote: remoteDef.columnNames, local: def.columnNames, renames: info.renames)
            remoteLower = zip(remoteDef.columnNames, translated).map { ($1 ?? $0).lowercased() }
            renamedFrom = Dictionary(zip(remoteDef.columnNames, translated).compactMap { n, t in t.map { (n.lowercased(), $0) } }, uniquingKeysWith: { a, _ in a })
            keyLower = def.primaryKeyColumns.map { $0.lowercased() }
            keyAffinities = def.primaryKeyColumns.map { k in KeyAffinity(declaredType: def.columns.first { $0.name == k }?.type ?? "", strict: strict) }
            var index: [String: Int] = [:]
            var names: [String: String] = [:]
            for (i, c) in def.columnNames.enumerated() where index[c.lowercased()] == nil {
                index[c.lowercased()] = i
                names[c.lowercased()] = c
            }
            localIndex = index
            localName = names
            allColumns = remoteLower.compactMap { names[$0] }
            let remoteLower = self.remoteLower
            // NOT NULL columns without a default that the diff does not carry (it comes from an older app version):
            // they take the value the app declared for sync, or the row cannot be placed.
            let carried = Set(remoteLower)
            var fillers: [String: SQLValue] = [:]
            var unplaceable: [String] = []
            let declared = Dictionary(info.table.policy.syncDefaults.map { ($0.key.lowercased(), $0.value) }, uniquingKeysWith: { a, _ in a })
            for c in def.columns where c.notNull && c.defaultValue == nil && c.primaryKey == 0 && !carried.contains(c.name.lowercased()) {
                if let v = declared[c.name.lowercased()] { fillers[c.name.lowercased()] = .text(v) } else { unplaceable.append(c.name) }
            }
            self.fillers = fillers
            self.unplaceable = unplaceable
            insertColumns = allColumns + def.columnNames.filter { fillers[$0.lowercased()] != nil }
            keyPositions = keyLower.map { remoteLower.firstIndex(of: $0) }
            fastKeyPositions = keyPositions.contains(where: { $0 == nil }) ? nil : keyPositions.compactMap { $0 }
            allPositions = remoteLower.indices.filter { names[remoteLower[$0]] != nil }
            aside = remoteDef.columnNames.enumerated().filter { names[remoteLower[$0.offset]] == nil }.map { ($0.offset, $0.element) }
            let policy = info.table.policy
            ownerPosition = policy.policy == .ownerOnly ? remoteLower.firstIndex(of: (policy.ownerColumn ?? "owner_id").lowercased()) : nil
            fastInsert = (policy.policy != .ownerOnly || ownerPosition != nil) && fillers.isEmpty && unplaceable.isEmpty && aside.isEmpty
            // Every foreign key: a reference to a parent deleted here is settled by the merge (Merger+Restrict).
            hasDeleteActions = !def.foreignKeys.isEmpty
            let table = quoteIdentifier(def.name)
            whereKey = def.primaryKeyColumns.map { quoteIdentifier($0) + " = ?" }.joined(separator: " AND ")
            selectSQL = "SELECT " + def.columnNames.map(quoteIdentifier).joined(separator: ", ") + " FROM " + table + " WHERE " + whereKey
            insertAllSQL = "INSERT" + orAbort + " INTO " + table + " (" + insertColumns.map(quoteIdentifier).joined(separator: ", ") + ") VALUES ("
                + Array(repeating: "?", count: insertColumns.count).joined(separator: ", ") + ")"
            deleteSQL = "DELETE FROM " + table + " WHERE " + whereKey
            resetMissingSQL = Self.resetSQL(def.columns.filter { c in c.primaryKey == 0 && !carried.contains(c.name.lowercased()) }, fillers: fillers,
                                            table: table, whereKey: whereKey, orAbort: orAbort)
            insertNewSQL = "INSERT" + orAbort + " INTO " + table + " (" + allColumns.map(quoteIdentifier).joined(separator: ", ") + ") VALUES ("
                + Array(repeating: "?", count: allColumns.count).joined(separator: ", ") + ")" + " ON CONFLICT (" + def.primaryKeyColumns.map(quoteIdentifier).joined(separator: ", ") + ") DO NOTHING"
        }
    }

    /// What one incoming row change is about.
    struct RowContext {
        var plan: TablePlan
        var remote: [String: SQLValue]          // lower-cased column name -> incoming value
        var change: RowChange
        var keyValues: [SQLValue]
        var info: TrackedInfo { plan.info }
        var def: TableDefinition { plan.info.definition }
        var table: String { plan.info.table.name }
        /// Changed columns named as in the local table.
        var changedColumns: [String] {
            guard let changed = change.changedColumns else { return plan.allColumns }
            return changed.compactMap { plan.localName[$0.lowercased()] }
        }
        /// Every incoming column named as in the local table (without those a state diff's row holds no value for).
        var allColumns: [String] {
            plan.allColumns.count == remote.count ? plan.allColumns : plan.allColumns.filter { remote[$0.lowercased()] != nil }
        }
        /// Index of a local column by name (case-insensitive).
        func index(_ column: String) -> Int? { plan.localIndex[column.lowercased()] }
        func value(_ column: String) -> SQLValue { remote[column.lowercased()] ?? plan.fillers[column.lowercased()] ?? .null }
        func clock(_ column: String) -> Clock {
            if change.columnClocks.isEmpty { return change.clock }
            return change.columnClocks.first(where: { $0.key.lowercased() == column.lowercased() })?.value ?? change.clock
        }
    }

    // MARK: Upserts

    mutating func mergeUpsert(_ r: RowContext, _ local: LocalRow) throws {
        let policy = r.info.table.policy
        let exists = local.values != nil
        switch policy.policy {
        case .appendOnly:
            if exists || local.deleted != nil {
                return try refuse(r, local, columns: r.changedColumns, reason: "append-only table: remote \(exists ? "update" : "change to a deleted row") refused")
            }
            return try insertWhole(r, local)
        case .ownerOnly:
            let ownerColumn = policy.ownerColumn ?? "owner_id"
            let owner = local.values.flatMap { v in r.index(ownerColumn).map { v[$0] } } ?? r.value(ownerColumn)
            if owner != .text(meta.authorUser) {
                return try refuse(r, local, columns: r.changedColumns, reason: "owner-only table: user '\(meta.authorUser)' is not the row's owner (\(owner))")
            }
        case .remoteWins:
            if !exists { return try insertWhole(r, local) }
            return try take(r, local, columns: r.born(local) ? r.allColumns : r.changedColumns, reason: "remote-wins policy", logAll: true)
        case .localWins:
            if !exists {
                if local.deleted != nil { return try refuse(r, local, columns: r.changedColumns, reason: "local-wins policy: row deleted here") }
                return try insertWhole(r, local)
            }
            let mine = r.changedColumns.filter { editedHere(local, $0) }
            try take(r, local, columns: r.changedColumns.filter { !mine.contains($0) }, reason: "", logAll: false)
            if !mine.isEmpty { try refuse(r, local, columns: mine, reason: "local-wins policy: column changed on this device") }
            return
        case .lwwColumn, .lwwRow:
            break
        }

        // Last writer wins, with row incarnations: two inserts of one key are told apart by their born clocks.
        guard exists else {
            if let deleted = local.deleted {
                if r.change.born > local.born { return try insertWhole(r, local) }
                if r.change.born == local.born {
                    if policy.onDeleteConflict == .lastWriterWins && r.change.latestClock > deleted { return try resurrect(r, local, deletedAt: deleted) }
                    return try refuse(r, local, columns: r.changedColumns, reason: "row was deleted; the delete wins over a concurrent update")
                }
                return try refuse(r, local, columns: r.changedColumns, reason: "change to an older version of a row deleted here")
            }
            return try insertWhole(r, local)
        }
        if r.change.born > local.born {
            return try replaceWhole(r, local, reason: "the same key was inserted on two devices: the later insert wins the whole row")
        }
        if r.change.born < local.born {
            try keepBirthOfUnexportedInsert(r, local)
            return try refuse(r, local, columns: r.changedColumns, reason: "the same key was inserted on two devices: the later insert (this one) wins the whole row")
        }
        if policy.policy == .lwwRow {
            let localMax = r.def.columnNames.map { localClock(local, $0) }.max() ?? local.born
            let remoteMax = ([r.change.clock] + Array(r.change.columnClocks.values)).max()!
            if remoteMax > localMax {
                return try take(r, local, columns: r.allColumns, reason: "row-level last writer wins: remote row is later", logAll: false)
            }
            return try refuse(r, local, columns: r.changedColumns, reason: "row-level last writer wins: local row is later")
        }
        var taken: [String] = []
        var refused: [String] = []
        var takenByResolver: [String] = []
        var keptByResolver: [String] = []
        for c in r.changedColumns {
            guard let li = r.index(c) else { continue }
            let lv = local.values![li], rv = r.value(c)
            let lc = localClock(local, c), rc = r.clock(c)
            // A remote value the local one was made on top of (the very clock it replaced, or an older one of the
            // same site) is known here: nothing to merge, decide or log (a snapshot merged after a restore carries
            // many such values).
            if rc <= lc, Self.supersededKnowingly(rc, base: local.clocks[c.lowercased()] ?? local.born) { continue }
            let byClock = rc > lc
            var remoteWins = byClock
            if !lv.isStoredLike(rv), isConcurrent(lc), let resolver = resolvers[r.table] {
                switch resolver(ConflictContext(table: r.table, key: local.key, column: c, localValue: lv, remoteValue: rv,
                                                localClock: lc == Merger.unexported ? nil : lc, remoteClock: rc)) {
                case .acceptRemote: remoteWins = true
                case .keepLocal: remoteWins = false
                case .byClock: break
                }
                if remoteWins != byClock { if remoteWins { takenByResolver.append(c) } else { keptByResolver.append(c) } }
            }
            if remoteWins { taken.append(c) } else if rc != lc { refused.append(c) }
        }
        try take(r, local, columns: taken, reason: takenByResolver.isEmpty ? "concurrent edit: the remote change is later" : "concurrent edit: decided by the table's resolver", logAll: false)
        if !refused.isEmpty { try refuse(r, local, columns: refused, reason: keptByResolver.isEmpty ? "concurrent edit: the local change is later" : "concurrent edit: decided by the table's resolver") }
        // A resolver that picked the value with the older clock made a decision the other devices must hear of: it
        // is recorded as a local edit (clock taken now, later than both), so it is exported and wins everywhere,
        // whatever each device knew when the conflict met it. Otherwise a device that did not see the edits as
        // concurrent (its resolver never asked) would keep the later clock's value for good.
        let decided = takenByResolver + keptByResolver
        if !decided.isEmpty, local.values != nil {
            try captureDecision(tid: r.info.table.id, key: local.key, op: 2, mask: Self.changeMask(r.info, columns: decided),
                                after: max(r.change.latestClock, decided.map { localClock(local, $0) }.filter { $0 != Merger.unexported }.max() ?? .zero))
        }
    }

    /// An insert made here and not yet exported outlived an incoming change (an insert or a delete) of an older
    /// version of its key, which the devices that never saw this insert take. Its birth is recorded now: should the
    /// row be deleted here before the next export, the delete still goes out born with it (instead of coalescing to
    /// nothing), so those devices end the older version too, and this device keeps refusing that version's late
    /// changes instead of taking it back.
    mutating func keepBirthOfUnexportedInsert(_ r: RowContext, _ local: LocalRow) throws {
        if local.newHere { try setRowMeta(r, local.key, born: local.born, deleted: nil) }
    }

    /// Whether a remote column clock was already superseded by the local value's clock `base` (the clock the value
    /// held before any edit not yet exported): the same clock, or an older one of the same site, which that site
    /// overwrote knowing it.
    static func supersededKnowingly(_ remote: Clock, base: Clock) -> Bool {
        guard base != Merger.unexported, base != .zero else { return false }
        return remote == base || (remote.site == base.site && remote < base)
    }

    /// Whether this device changed a column itself (for local-wins).
    func editedHere(_ local: LocalRow, _ column: String) -> Bool {
        let c = localClock(local, column)
        return c == Merger.unexported || c.site == ownSite
    }

    // MARK: Deletes

    mutating func mergeDelete(_ r: RowContext, _ local: LocalRow) throws {
        let change = r.change
        guard let values = local.values else {
            // Keep a tombstone so late updates to this version of the row are recognised.
            if change.born >= local.born || local.deleted == nil {
                let born = max(change.born, local.born == Merger.unexported ? change.born : local.born)
                let del = max(change.clock, local.deleted.flatMap { $0 == Merger.unexported ? nil : $0 } ?? change.clock)
                try setRowMeta(r, local.key, born: born, deleted: del)
            }
            return
        }
        let policy = r.info.table.policy
        switch policy.policy {
        case .appendOnly:
            return try refuseDelete(r, local, reason: "append-only table: remote delete refused")
        case .ownerOnly:
            let ownerColumn = policy.ownerColumn ?? "owner_id"
            let owner = r.index(ownerColumn).map { values[$0] } ?? .null
            if owner != .text(meta.authorUser) {
                return try refuseDelete(r, local, reason: "owner-only table: user '\(meta.authorUser)' is not the row's owner (\(owner))")
            }
        case .localWins:
            if r.def.columnNames.contains(where: { editedHere(local, $0) }) {
                return try refuseDelete(r, local, reason: "local-wins policy: row changed on this device")
            }
        case .remoteWins:
            return try deleteRow(r, local, logConcurrent: true)
        case .lwwColumn, .lwwRow:
            break
        }
        if change.born < local.born {
            try keepBirthOfUnexportedInsert(r, local)
            return try refuseDelete(r, local, reason: "delete of an older version of this row (the key was re-inserted)")
        }
        if change.born == local.born && policy.onDeleteConflict == .lastWriterWins {
            if policy.policy == .lwwRow {
                // Whole rows: a row changed after the delete survives as it is (erasing the columns older than the
                // delete would mix row versions, and a device that took the row whole from another holds other
                // column clocks for it than the device that wrote it).
                let localMax = r.def.columnNames.map { localClock(local, $0) }.max() ?? local.born
                if localMax > change.clock {
                    return try refuseDelete(r, local, reason: "row-level last writer wins: the row changed after the delete")
                }
            } else if r.def.columnNames.contains(where: { localClock(local, $0) > change.clock }) {
                return try eraseOlderColumns(r, local, deletedAt: change.clock)
            }
        }
        try deleteRow(r, local, logConcurrent: true)
    }

    // MARK: Last-writer-wins deletes

    // With `last-writer-wins` for update versus delete, a delete erases every column older than it and
    // only columns changed after it survive, whichever arrives first: a late update brings a deleted row
    // back with just its own changes, and a delete that meets later changes keeps the row but erases the
    // rest. Erased columns become NULL (NOT NULL columns keep a value) with the delete's clock, so
    // changes older than the delete arriving later are refused. Every replica ends the same.

    /// Brings back a row deleted here because an update arrived that is later than the delete: with its changed
    /// columns (the others erased), or, in an `lww-row` table, whole.
    mutating func resurrect(_ r: RowContext, _ local: LocalRow, deletedAt: Clock) throws {
        guard try placeOrHold(r, local) else { return }
        let whole = r.info.table.policy.policy == .lwwRow
        // A state row (a snapshot's or a roll-up's) carries every column: only those changed after the delete are its
        // changes here, as the diffs it stands for would have brought.
        let brought = whole ? r.allColumns
            : meta.kind.carriesState ? r.changedColumns.filter { r.change.clock(forColumn: $0) > deletedAt } : r.changedColumns
        let changed = Set(brought.map { $0.lowercased() })
        let keys = Set(r.def.primaryKeyColumns.map { $0.lowercased() })
        // Keys, the changed columns, and NOT NULL columns (which cannot be erased to NULL) take incoming values.
        let cols = r.def.columns.filter { c in
            let l = c.name.lowercased()
            return r.plan.localName[l] != nil && (r.remote[l] != nil || r.plan.fillers[l] != nil) && (keys.contains(l) || changed.contains(l) || c.notNull)
        }.map(\.name)
        let sql = "INSERT" + r.plan.orAbort + " INTO " + quoteIdentifier(r.table) + " (" + cols.map(quoteIdentifier).joined(separator: ", ") + ") VALUES ("
            + Array(repeating: "?", count: cols.count).joined(separator: ", ") + ")"
        guard try writeResolvingUnique(r, local, newRow: Dictionary(cols.map { ($0.lowercased(), r.value($0)) }, uniquingKeysWith: { a, _ in a }),
                                       { m in try m.cached(sql).run(cols.map { r.value($0) }) }) else { return }
        try setRowMeta(r, local.key, born: local.born, deleted: nil)
        try setColumnClocks(r, local.key, columns: brought, clearFirst: true)
        // The row comes back referencing what it referenced: a parent deleted here meanwhile gets its ON DELETE action.
        try applyDeleteActionsForDeletedParents(r, local, written: cols)
        let erased = r.def.columnNames.filter { !changed.contains($0.lowercased()) && !keys.contains($0.lowercased()) }
        // A delete made here and not exported yet is not sent now (the row is back), so what it did to the row is
        // sent instead: the erased columns, as changed by this device when it deleted the row (their clocks are
        // recorded when that change is exported). Devices that never get the delete would otherwise keep the older
        // values.
        let sendErasure = local.pending?.lastOp == 3 && deletedAt.site == ownSite && !erased.isEmpty
        if !sendErasure { try setClocks(r, local.key, columns: erased, clock: deletedAt) }
        try purgePending(r, local)
        if sendErasure {
            let mask = Self.changeMask(r.info, columns: erased)
            try cached("INSERT INTO rtsync_changes(tid, pk, op, cols, hlc) VALUES (?, ?, 2, ?, ?)")
                .run([.integer(r.info.table.id), .text(local.key), mask, .integer(deletedAt.hlc.rawValue)])
            pending[RowKey(r.info.table.id, local.key), default: PendingLocal()].record(op: 2, mask: mask, hlc: deletedAt.hlc.rawValue)
        }
        report.inserted += 1
    }

    /// A delete met a row changed after it: erase the columns older than the delete, keep the later ones.
    mutating func eraseOlderColumns(_ r: RowContext, _ local: LocalRow, deletedAt: Clock) throws {
        guard let values = local.values else { return }
        let keys = Set(r.def.primaryKeyColumns.map { $0.lowercased() })
        var erase: [String] = []
        var clockOnly: [String] = []
        for (i, c) in r.def.columns.enumerated() where !keys.contains(c.name.lowercased()) {
            let lc = localClock(local, c.name)
            guard lc < deletedAt else { continue }
            if c.notNull || values[i] == .null {
                clockOnly.append(c.name)
            } else {
                erase.append(c.name)
                if isConcurrent(lc) {
                    try log(r, local, column: c.name, localValue: values[i], remoteValue: .null, localClock: lc, winner: "remote",
                            reason: "deleted on another device; only changes made after the delete survive")
                }
            }
        }
        if !erase.isEmpty {
            let sql = "UPDATE" + r.plan.orAbort + " " + quoteIdentifier(r.table) + " SET " + erase.map { quoteIdentifier($0) + " = NULL" }.joined(separator: ", ") + " WHERE " + r.plan.whereKey
            try cached(sql).run(r.keyValues)
            report.updated += 1
        }
        try ensureRowMeta(r, local)
        try setClocks(r, local.key, columns: erase + clockOnly, clock: deletedAt)
    }

    /// A key with column clocks always has an `rtsync_rows` entry (born 0 when its birth is unknown here).
    mutating func ensureRowMeta(_ r: RowContext, _ local: LocalRow) throws {
        if !local.hasMeta { try cached(SyncDatabase.ensureRowMetaSQL).run([.integer(r.info.table.id), .text(local.key)]) }
    }

    mutating func setClocks(_ r: RowContext, _ key: String, columns: [String], clock: Clock) throws {
        let set = try cached("INSERT OR REPLACE INTO rtsync_clocks(tid, pk, col, hlc, site) VALUES (?,?,?,?,?)")
        for c in columns {
            try set.run([.integer(r.info.table.id), .text(key), .text(c), .integer(clock.hlc.rawValue), .text(clock.site)])
        }
    }

    // MARK: Writes

    mutating func insertWhole(_ r: RowContext, _ local: LocalRow) throws {
        guard try placeOrHold(r, local) else { return }
        var cols = r.plan.insertColumns
        var sql = r.plan.insertAllSQL
        if r.allColumns.count < r.plan.allColumns.count {
            // A state diff's row without a value for some columns: they take their defaults, as on an insert without them.
            cols = cols.filter { r.remote[$0.lowercased()] != nil || r.plan.fillers[$0.lowercased()] != nil }
            sql = "INSERT" + r.plan.orAbort + " INTO " + quoteIdentifier(r.table) + " (" + cols.map(quoteIdentifier).joined(separator: ", ") + ") VALUES ("
                + Array(repeating: "?", count: cols.count).joined(separator: ", ") + ")"
        }
        guard try writeResolvingUnique(r, local, newRow: Dictionary(cols.map { ($0.lowercased(), r.value($0)) }, uniquingKeysWith: { a, _ in a }),
                                       { m in try m.cached(sql).run(cols.map { r.value($0) }) }) else { return }
        try setRowMeta(r, local.key, born: r.change.born, deleted: nil)
        try setColumnClocks(r, local.key, columns: r.changedColumns, clearFirst: true)
        try markUncarriedColumns(r, local.key)
        try purgePending(r, local)
        report.inserted += 1
        try applyDeleteActionsForDeletedParents(r, local, written: cols)
    }

    mutating func replaceWhole(_ r: RowContext, _ local: LocalRow, reason: String) throws {
        let cols = r.allColumns
        for c in cols {
            guard let li = r.index(c) else { continue }
            if !local.values![li].isStoredLike(r.value(c)) {
                try log(r, local, column: c, localValue: local.values![li], remoteValue: r.value(c), localClock: localClock(local, c), winner: "remote", reason: reason)
            }
        }
        guard try update(r, local, columns: cols) else { return }
        // The new incarnation has no value of its own for columns its author's app version lacks: never a mixed row.
        if let sql = r.plan.resetMissingSQL { try cached(sql).run(r.keyValues) }
        // Nor for those a state diff's row holds no value for.
        let absent = r.plan.allColumns.filter { r.remote[$0.lowercased()] == nil }
        if !absent.isEmpty, let sql = r.plan.resetSQL(absent) { try cached(sql).run(r.keyValues) }
        try setRowMeta(r, local.key, born: r.change.born, deleted: nil)
        try setColumnClocks(r, local.key, columns: r.changedColumns, clearFirst: true)
        try markUncarriedColumns(r, local.key)
        try purgePending(r, local)
        report.updated += 1
        try applyDeleteActionsForDeletedParents(r, local, written: cols)
    }

    /// Takes the remote values of `columns`; logs overwritten values that the author had not seen (or all, when `logAll`).
    mutating func take(_ r: RowContext, _ local: LocalRow, columns: [String], reason: String, logAll: Bool) throws {
        guard !columns.isEmpty, let values = local.values else { return }
        var changedAny = false
        for c in columns {
            guard let li = r.index(c) else { continue }
            let lc = localClock(local, c)
            if !values[li].isStoredLike(r.value(c)) {
                changedAny = true
                if logAll || isConcurrent(lc) {
                    try log(r, local, column: c, localValue: values[li], remoteValue: r.value(c), localClock: lc, winner: "remote",
                            reason: reason.isEmpty ? "remote change is later" : reason)
                }
            }
        }
        if changedAny { guard try update(r, local, columns: columns) else { return } }
        try ensureRowMeta(r, local)
        try setColumnClocks(r, local.key, columns: columns, clearFirst: false)
        if changedAny {
            report.updated += 1
            try applyDeleteActionsForDeletedParents(r, local, written: columns)
        }
    }

    mutating func refuse(_ r: RowContext, _ local: LocalRow, columns: [String], reason: String) throws {
        for c in columns {
            let lv = local.values.flatMap { v in r.index(c).map { v[$0] } } ?? .null
            if local.values != nil && lv.isStoredLike(r.value(c)) { continue }
            try log(r, local, column: c, localValue: lv, remoteValue: r.value(c), localClock: localClock(local, c), winner: "local", reason: reason)
        }
    }

    mutating func refuseDelete(_ r: RowContext, _ local: LocalRow, reason: String) throws {
        try log(r, local, column: "", localValue: .null, remoteValue: .null, localClock: local.born, winner: "local", reason: reason)
    }

    mutating func deleteRow(_ r: RowContext, _ local: LocalRow, logConcurrent: Bool, blockable: Bool = true) throws {
        // A remote delete of a row that children still reference (ON DELETE RESTRICT / NO ACTION) waits for the
        // end of the diff, which may delete those children too.
        if logConcurrent && blockable, let values = local.values, try isReferenced(r.info, values: values) {
            blockedDeletes.append((r, local))
            return
        }
        if logConcurrent, let values = local.values {
            for (i, c) in r.def.columnNames.enumerated() where isConcurrent(localClock(local, c)) && !r.def.primaryKeyColumns.contains(c) {
                try log(r, local, column: c, localValue: values[i], remoteValue: .null, localClock: localClock(local, c), winner: "remote",
                        reason: "row deleted on another device while changed here")
            }
        }
        // What the schema's ON DELETE actions will do to children here is merged like any change.
        var visited: Set<RowKey> = [RowKey(r.info.table.id, local.key)]
        // Children that RESTRICT / NO ACTION would keep the row for lose their reference first (Merger+Restrict).
        let dropped = try local.values.map { try dropReferences(to: r.info, values: $0, seen: &visited) } ?? []
        let actions = try local.values.map { try pendingDeleteActions(parent: r.info, values: $0, seen: &visited) } ?? []
        try cached(r.plan.deleteSQL).run(r.keyValues)
        // A delete this device decided (a UNIQUE collision's loser) was made by nobody else: all its actions are ours.
        try recordDeleteActions(actions, deleted: r.change.clock, decidedHere: !logConcurrent)
        try recordDeleteActions(dropped, deleted: r.change.clock, decidedHere: true)
        try setRowMeta(r, local.key, born: max(r.change.born, local.born == Merger.unexported ? r.change.born : local.born), deleted: r.change.clock)
        try cached("DELETE FROM rtsync_clocks WHERE tid = ? AND pk = ?").run([.integer(r.info.table.id), .text(local.key)])
        try purgePending(r, local)
        report.deleted += 1
    }

    /// Updates `columns` of the row to the incoming values; false when a UNIQUE collision made the remote row lose.
    mutating func update(_ r: RowContext, _ local: LocalRow, columns: [String]) throws -> Bool {
        let sql = "UPDATE" + r.plan.orAbort + " " + quoteIdentifier(r.table) + " SET " + columns.map { quoteIdentifier($0) + " = ?" }.joined(separator: ", ")
            + " WHERE " + r.def.primaryKeyColumns.map { quoteIdentifier($0) + " = ?" }.joined(separator: " AND ")
        func newRow() -> [String: SQLValue] {
            var row: [String: SQLValue] = [:]
            for (i, c) in r.def.columnNames.enumerated() { row[c.lowercased()] = local.values?[i] ?? .null }
            for c in columns { row[c.lowercased()] = r.value(c) }
            return row
        }
        return try writeResolvingUnique(r, local, newRow: newRow()) { m in try m.cached(sql).run(columns.map { r.value($0) } + r.keyValues) }
    }

    /// Runs a write; on a UNIQUE collision with another row, the row born first keeps the value (the key text
    /// breaks ties), the same on every device. Returns false when the incoming row lost.
    /// `newRow` (the row as the write would leave it, by lower-cased column) is only built when a collision needs it.
    mutating func writeResolvingUnique(_ r: RowContext, _ local: LocalRow, newRow: @autoclosure () -> [String: SQLValue],
                                       _ write: (inout Merger) throws -> Void) throws -> Bool {
        for _ in 0..<8 {
            do {
                try write(&self)
                return true
            } catch let e as SQLiteError where e.isUniqueViolation {
                guard let (other, constraint) = try collidingRow(r, newRow: newRow()) else { throw e }
                let otherRow = try localRow(r.info, keyValues: other, plan: r.plan)
                let remoteFirst = r.change.born < otherRow.born || (r.change.born == otherRow.born && local.key < otherRow.key)
                let reason = "UNIQUE (\(constraint.joined(separator: ", "))) collision between two rows: the row created first keeps the value"
                if !remoteFirst {
                    // The incoming row loses. Its version here must go the same way as on a device that had the
                    // incoming row first and deleted it when the winner arrived: keeping the old local version
                    // (or no trace of a refused insert) made replicas differ by arrival order.
                    try refuse(r, local, columns: r.changedColumns, reason: reason)
                    if let values = local.values {
                        for (i, c) in r.def.columnNames.enumerated() where !r.changedColumns.contains(c) {
                            try log(r, local, column: c, localValue: values[i], remoteValue: .null, localClock: localClock(local, c), winner: "remote", reason: reason)
                        }
                        try deleteRow(r, local, logConcurrent: false)
                    } else {
                        try setRowMeta(r, local.key, born: r.change.born, deleted: r.change.latestClock)
                    }
                    try captureResolutionDelete(r.info, key: local.key, after: r.change.latestClock)
                    return false
                }
                let otherContext = RowContext(plan: r.plan, remote: [:], change: r.change, keyValues: other)
                for (i, c) in r.def.columnNames.enumerated() {
                    try log(otherContext, otherRow, column: c, localValue: otherRow.values?[i] ?? .null, remoteValue: .null,
                            localClock: localClock(otherRow, c), winner: "remote", reason: reason)
                }
                try deleteRow(otherContext, otherRow, logConcurrent: false)
                // The delete travels even for a row never exported (made here while the diffs were on their way):
                // its tombstone, born with that row, refuses inserts of the key born before it, so the devices that
                // never saw the row must hear of the delete too, as they would have had the row been exported first.
                try setRowMeta(otherContext, otherRow.key, born: otherRow.born, deleted: r.change.latestClock)
                try captureResolutionDelete(r.info, key: otherRow.key, after: r.change.latestClock)
            }
        }
        throw SyncEngineError.diffRejected(file: reader.url.path, reason: "could not resolve UNIQUE collisions for a row of '\(r.table)'")
    }

    /// Records the delete of a row that lost a UNIQUE collision as a local change, so it is exported like any edit.
    /// Which row loses depends on the rows present when the collision happens, and that depends on arrival order;
    /// sending the decision on makes every replica drop the same row (the later-born one) after the next exchange.
    /// The delete's clock is taken now, as a capture trigger takes it, and is later than the change that decided it.
    mutating func captureResolutionDelete(_ info: TrackedInfo, key: String, after decider: Clock) throws {
        try captureDecision(tid: info.table.id, key: key, op: 3, mask: .null, after: decider)
    }

    /// The key of a local row (other than this one) holding the same values in a UNIQUE constraint or unique index
    /// (partial and expression indexes, with their collations), and the index's columns or expressions.
    mutating func collidingRow(_ r: RowContext, newRow: [String: SQLValue]) throws -> ([SQLValue], [String])? {
        let keys = r.def.primaryKeyColumns
        if uniqueIndexes[r.table] == nil { uniqueIndexes[r.table] = try UniqueIndex.read(db, table: r.table) }
        let columns = r.def.columnNames
        let values = columns.map { newRow[$0.lowercased()] ?? .null }
        for u in uniqueIndexes[r.table] ?? [] {
            let s = try cached(u.collisionSQL(table: r.table, columns: columns, keys: keys))
            try s.bind(values + r.keyValues)
            let found = try s.step() ? s.row() : nil
            s.reset()
            if let found { return (found, u.label) }
        }
        return nil
    }

    // MARK: Foreign keys

    /// A remote row may reference a parent row that this device has deleted: the reference and the delete were
    /// concurrent. A device that received them the other way round (reference first) had the schema's
    /// `ON DELETE SET NULL / CASCADE` applied by SQLite when the delete arrived; do the same here, so both end
    /// alike instead of the deferred foreign key check rejecting the diff on every attempt.
    /// Only parents known to be deleted (a tombstone, or a delete not yet exported) qualify: a parent that was
    /// simply never seen still fails the foreign key check.
    mutating func applyDeleteActionsForDeletedParents(_ r: RowContext, _ local: LocalRow, written: [String]) throws {
        let writtenSet = Set(written.map { $0.lowercased() })
        for fk in r.def.foreignKeys where !fk.columns.isEmpty {
            let action = Self.mergeAction(fk, r.def)
            guard action == "SET NULL" || action == "CASCADE",
                  fk.columns.contains(where: { writtenSet.contains($0.lowercased()) }),
                  let parent = tracked[fk.table] ?? tracked.values.first(where: { $0.table.name.lowercased() == fk.table.lowercased() }) else { continue }
            let parentKeys = parent.definition.primaryKeyColumns
            let referenced = fk.referencedColumns.isEmpty ? parentKeys : fk.referencedColumns
            // The tombstone is kept by primary key, so the reference must name the parent's key columns.
            guard referenced.count == fk.columns.count,
                  Set(referenced.map { $0.lowercased() }) == Set(parentKeys.map { $0.lowercased() }) else { continue }
            let whereKey = r.def.primaryKeyColumns.map { quoteIdentifier($0) + " = ?" }.joined(separator: " AND ")
            let select = try cached("SELECT " + fk.columns.map(quoteIdentifier).joined(separator: ", ") + " FROM " + quoteIdentifier(r.table) + " WHERE " + whereKey)
            try select.bind(r.keyValues)
            let childValues = try select.step() ? select.row() : nil
            select.reset()
            guard let childValues, !childValues.contains(.null) else { continue }
            let exists = try cached("SELECT 1 FROM " + quoteIdentifier(parent.table.name) + " WHERE "
                                    + referenced.map { quoteIdentifier($0) + " = ?" }.joined(separator: " AND ") + " LIMIT 1")
            try exists.bind(childValues)
            let parentExists = try exists.step()
            exists.reset()
            if parentExists { continue }
            // The parent's key text, with its values in the parent's key order.
            let byName = Dictionary(zip(referenced.map { $0.lowercased() }, childValues), uniquingKeysWith: { a, _ in a })
            let parentKey = try keyText(parentKeys.map { byName[$0.lowercased()] ?? .null }, of: parent.definition)
            let tombstone = try cached("SELECT del_hlc IS NOT NULL FROM rtsync_rows WHERE tid = ? AND pk = ?")
            try tombstone.bind([.integer(parent.table.id), .text(parentKey)])
            let hasTombstone = try tombstone.step() && tombstone.column(0).int64 == 1
            tombstone.reset()
            let deletedHere = hasTombstone || pending[RowKey(parent.table.id, parentKey)]?.lastOp == 3
            guard deletedHere else { continue }
            let reason = "references a row of '\(parent.table.name)' deleted on this device: ON DELETE \(action) applied"
            // The action is a decision of this device: logged, and captured so that every replica ends the same.
            if action == "SET NULL" {
                for (c, v) in zip(fk.columns, childValues) {
                    try log(r, local, column: c, localValue: .null, remoteValue: v, localClock: Merger.unexported, winner: "local", reason: reason)
                }
                // A declared SET NULL says OR ABORT, as SQLite runs its own FK actions (https://sqlite.org/foreignkeys.html#fk_actions):
                // a column's or index's conflict clause must not settle it, e.g. `NOT NULL ON CONFLICT REPLACE` would file
                // the row under the column default where a device that got the delete after the row fails the diff
                // (NOT NULL). A RESTRICT / NO ACTION key the merge turns into SET NULL (`mergeAction`) says nothing, as
                // `dropReferences` does in the other arrival order: the OR clause also governs the app's triggers.
                let orAbort = fk.onDelete.uppercased() == "SET NULL" ? " OR ABORT" : ""
                try cached("UPDATE" + orAbort + " " + quoteIdentifier(r.table) + " SET " + fk.columns.map { quoteIdentifier($0) + " = NULL" }.joined(separator: ", ")
                           + " WHERE " + whereKey).run(r.keyValues)
                try captureDecision(tid: r.info.table.id, key: local.key, op: 2, mask: Self.changeMask(r.info, columns: fk.columns), after: r.change.latestClock)
            } else {
                try log(r, local, column: "", localValue: .null, remoteValue: .null, localClock: Merger.unexported, winner: "local", reason: reason)
                try cached("DELETE FROM " + quoteIdentifier(r.table) + " WHERE " + whereKey).run(r.keyValues)
                try setRowMeta(r, local.key, born: r.change.born, deleted: r.change.latestClock)
                try cached("DELETE FROM rtsync_clocks WHERE tid = ? AND pk = ?").run([.integer(r.info.table.id), .text(local.key)])
                try captureDecision(tid: r.info.table.id, key: local.key, op: 3, mask: .null, after: r.change.latestClock)
                return
            }
        }
    }

    // MARK: Bookkeeping

    mutating func setRowMeta(_ r: RowContext, _ key: String, born: Clock, deleted: Clock?) throws {
        try cached("INSERT INTO rtsync_rows(tid, pk, born_hlc, born_site, del_hlc, del_site) VALUES (?,?,?,?,?,?) ON CONFLICT(tid, pk) DO UPDATE SET born_hlc = excluded.born_hlc, born_site = excluded.born_site, del_hlc = excluded.del_hlc, del_site = excluded.del_site")
            .run([.integer(r.info.table.id), .text(key), .integer(born.hlc.rawValue), .text(born.site),
                  deleted.map { .integer($0.hlc.rawValue) } ?? .null, deleted.map { .text($0.site) } ?? .null])
    }

    /// Records the incoming clocks of `columns` (a column without a clock row takes the row's born clock).
    mutating func setColumnClocks(_ r: RowContext, _ key: String, columns: [String], clearFirst: Bool) throws {
        let tid = Int64(r.info.table.id)
        if clearFirst { try cached("DELETE FROM rtsync_clocks WHERE tid = ? AND pk = ?").run([.integer(tid), .text(key)]) }
        let set = try cached("INSERT OR REPLACE INTO rtsync_clocks(tid, pk, col, hlc, site) VALUES (?,?,?,?,?)")
        for c in columns {
            let clock = r.clock(c)
            if clearFirst && clock == r.change.born { continue }
            try set.run([.integer(tid), .text(key), .text(c), .integer(clock.hlc.rawValue), .text(clock.site)])
        }
    }

    /// Columns of the local table the incoming row holds no value of (its author's app version lacks them, or a state
    /// diff's placeholder) get a zero clock when the row is made here from anything but its creator's insert (an update
    /// that arrived first, a relayed row): the value the row was born with, arriving later from a device that has the
    /// column, then wins over the default made up here instead of tying with the row's birth and losing.
    /// Such a row is also noted in `rtsync_partial`: columns this device's own migration adds later get a zero clock
    /// on it (`SyncDatabase.refreshTrackedTables`), for the same reason.
    mutating func markUncarriedColumns(_ r: RowContext, _ key: String) throws {
        let c = r.change
        guard c.changedColumns != nil || c.clock != c.born || !c.columnClocks.isEmpty else { return }
        try cached("INSERT OR REPLACE INTO rtsync_partial(tid, pk, born_hlc, born_site) VALUES (?, ?, ?, ?)")
            .run([.integer(r.info.table.id), .text(key), .integer(c.born.hlc.rawValue), .text(c.born.site)])
        let carried = Set(r.allColumns.map { $0.lowercased() })
        let keys = Set(r.def.primaryKeyColumns.map { $0.lowercased() })
        let uncarried = r.def.columnNames.filter { !carried.contains($0.lowercased()) && !keys.contains($0.lowercased()) }
        guard !uncarried.isEmpty else { return }
        let set = try cached("INSERT OR REPLACE INTO rtsync_clocks(tid, pk, col, hlc, site) VALUES (?, ?, ?, 0, '')")
        for column in uncarried { try set.run([.integer(r.info.table.id), .text(key), .text(column)]) }
    }

    /// Drops unexported local changes to a row that was replaced or deleted by the merge.
    mutating func purgePending(_ r: RowContext, _ local: LocalRow) throws {
        guard local.pending != nil else { return }
        try cached("DELETE FROM rtsync_changes WHERE tid = ? AND pk = ?").run([.integer(r.info.table.id), .text(local.key)])
        pending[RowKey(r.info.table.id, local.key)] = nil
    }

    mutating func log(_ r: RowContext, _ local: LocalRow, column: String, localValue: SQLValue, remoteValue: SQLValue,
                      localClock: Clock, winner: String, reason: String) throws {
        let unexported = localClock == Merger.unexported
        try cached("""
            INSERT INTO rtsync_conflicts(at, diff_id, tbl, pk, col, local_value, remote_value, local_hlc, local_site, remote_hlc, remote_site, winner, reason)
            VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)
            """).run([.text(now), .text(meta.id.string), .text(r.table), .text(local.key), .text(column), localValue, remoteValue,
                      unexported ? .null : .integer(localClock.hlc.rawValue), .text(unexported ? ownSite : localClock.site),
                      .integer(r.clock(column).hlc.rawValue), .text(r.clock(column).site), .text(winner), .text(reason)])
        report.conflicts += 1
    }
}

extension Merger.RowContext {
    /// Whether the incoming row is a different incarnation from the local one.
    func born(_ local: Merger.LocalRow) -> Bool { change.born != local.born }
}
