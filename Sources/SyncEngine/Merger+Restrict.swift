import DiffFormat
import Foundation
import RTSQLite

// MARK: - Deletes that children forbid (ON DELETE RESTRICT / NO ACTION)

// A foreign key without an ON DELETE action (NO ACTION, SQLite's default) or with RESTRICT forbids deleting a row
// that children reference. Locally SQLite enforces it. Across devices a delete can meet children its author never
// had (made concurrently, here or elsewhere): refusing it would wait forever, because no device can undo a delete
// without the deleted row's values, and two devices that each delete a row the other references would defer each
// other's diffs for good. So the delete wins, as a CASCADE / SET NULL would have it: a concurrent child whose
// reference may be NULL keeps its row with the reference set to NULL; one whose reference cannot be NULL is
// deleted. The same is decided where the child arrives after the delete (`applyDeleteActionsForDeletedParents`).
// Either way the child's old values are in the conflict log and the change is captured, so every device ends the
// same. Children the author deleted or moved in the same diff do not count: the delete waits for the end of the diff.

/// A foreign key whose ON DELETE forbids deleting a referenced row.
struct RestrictingKey {
    var childTable: String
    var columns: [String]
    /// Referenced columns of the parent (its primary key when the key names none).
    var referencedColumns: [String]
    var action: String
}

extension Merger {
    /// What the merge does to a concurrent child of a deleted row through `fk`: the key's own action, or for
    /// RESTRICT / NO ACTION, SET NULL when every referencing column may be NULL and CASCADE otherwise.
    static func mergeAction(_ fk: ForeignKeyDefinition, _ child: TableDefinition) -> String {
        let action = fk.onDelete.uppercased()
        guard action == "RESTRICT" || action == "NO ACTION" else { return action }
        let nullable = fk.columns.allSatisfy { c in
            !(child.columns.first { $0.name.lowercased() == c.lowercased() }?.notNull ?? false)
                && !child.primaryKeyColumns.contains { $0.lowercased() == c.lowercased() }
        }
        return nullable ? "SET NULL" : "CASCADE"
    }

    /// Foreign keys of every table in the database (tracked or not) that forbid deleting rows of `parent`.
    mutating func restrictingKeys(of parent: TrackedInfo) throws -> [RestrictingKey] {
        if restrictingKeys == nil {
            var byParent: [String: [RestrictingKey]] = [:]
            for child in try SyncDatabase.userTableNames(db) {
                guard let def = try TableDefinition.read(table: child, from: db) else { continue }
                for fk in def.foreignKeys where !fk.columns.isEmpty {
                    let action = fk.onDelete.uppercased()
                    guard action == "RESTRICT" || action == "NO ACTION" else { continue }
                    byParent[fk.table.lowercased(), default: []].append(
                        RestrictingKey(childTable: child, columns: fk.columns, referencedColumns: fk.referencedColumns, action: action))
                }
            }
            restrictingKeys = byParent
        }
        return restrictingKeys?[parent.table.name.lowercased()] ?? []
    }

    /// The values of the parent columns `key` references, or nil when one is NULL (no child can reference it).
    func referencedValues(_ key: RestrictingKey, parent def: TableDefinition, values: [SQLValue]) -> [SQLValue]? {
        let referenced = key.referencedColumns.isEmpty ? def.primaryKeyColumns : key.referencedColumns
        guard referenced.count == key.columns.count else { return nil }
        let parentValues = referenced.map { name in def.columnIndex(name).map { values[$0] } ?? .null }
        return parentValues.contains(.null) ? nil : parentValues
    }

    /// Whether a row of `info` holding `values` is referenced by a child through a key that forbids deleting it.
    mutating func isReferenced(_ info: TrackedInfo, values: [SQLValue]) throws -> Bool {
        let def = info.definition
        for key in try restrictingKeys(of: info) {
            guard let parentValues = referencedValues(key, parent: def, values: values) else { continue }
            var sql = "SELECT 1 FROM " + quoteIdentifier(key.childTable) + " WHERE "
                + key.columns.map { quoteIdentifier($0) + " = ?" }.joined(separator: " AND ")
            var args = parentValues
            // A row referencing itself does not keep itself alive.
            if key.childTable.lowercased() == info.table.name.lowercased() {
                sql += " AND NOT (" + def.primaryKeyColumns.map { quoteIdentifier($0) + " IS ?" }.joined(separator: " AND ") + ")"
                args += def.primaryKeyIndexes.map { values[$0] }
            }
            let s = try cached(sql + " LIMIT 1")
            try s.bind(args)
            let found = try s.step()
            s.reset()
            if found { return true }
        }
        return false
    }

    /// Carries out the remote deletes that children held up while the diff was merged. Children the diff deleted or
    /// moved no longer count; the ones left were made concurrently and lose their reference (see above).
    mutating func finishBlockedDeletes() throws {
        let blocked = blockedDeletes
        blockedDeletes = []
        for (r, _) in blocked {
            // The diff may have changed the row since: read it again.
            let local = try localRow(r.info, keyValues: r.keyValues, plan: r.plan)
            guard local.values != nil else { continue }
            try deleteRow(r, local, logConcurrent: true, blockable: false)
        }
    }

    /// Sets to NULL or deletes (see `mergeAction`) the rows that reference the row `values` of `parent` through a
    /// RESTRICT / NO ACTION key, with what SQLite's own ON DELETE actions do to the children of a deleted child;
    /// returns what was done, to be logged and captured. Rows of untracked tables are changed the same way.
    mutating func dropReferences(to parent: TrackedInfo, values: [SQLValue], depth: Int = 0, seen: inout Set<RowKey>) throws -> [DeleteAction] {
        guard depth < 16 else { return [] }
        var out: [DeleteAction] = []
        for key in try restrictingKeys(of: parent) {
            guard let parentValues = referencedValues(key, parent: parent.definition, values: values) else { continue }
            let child = tracked[key.childTable] ?? tracked.values.first { $0.table.name.lowercased() == key.childTable.lowercased() }
            let childDef = try child?.definition ?? TableDefinition.read(table: key.childTable, from: db)
            guard let childDef else { continue }
            let fk = ForeignKeyDefinition(columns: key.columns, table: parent.table.name, referencedColumns: key.referencedColumns, onDelete: key.action)
            let action = Self.mergeAction(fk, childDef)
            let whereRef = key.columns.map { quoteIdentifier($0) + " = ?" }.joined(separator: " AND ")
            let select = try cached("SELECT " + childDef.columnNames.map(quoteIdentifier).joined(separator: ", ") + " FROM " + quoteIdentifier(childDef.name) + " WHERE " + whereRef)
            try select.bind(parentValues)
            var rows: [[SQLValue]] = []
            while try select.step() { rows.append(select.row()) }
            select.reset()
            let whereKey = childDef.primaryKeyColumns.map { quoteIdentifier($0) + " = ?" }.joined(separator: " AND ")
            for row in rows {
                let keyValues = childDef.primaryKeyIndexes.map { row[$0] }
                if let child {
                    let k = try keyText(keyValues, of: childDef)
                    guard seen.insert(RowKey(child.table.id, k)).inserted else { continue }
                    out.append(DeleteAction(info: child, keyValues: keyValues, key: k, values: row, action: action, columns: key.columns,
                                            parentTable: parent.table.name, declared: key.action))
                }
                if action == "SET NULL" {
                    try cached("UPDATE " + quoteIdentifier(childDef.name) + " SET " + key.columns.map { quoteIdentifier($0) + " = NULL" }.joined(separator: ", ")
                               + " WHERE " + whereKey).run(keyValues)
                } else {
                    // The child goes too: first what its own removal forbids or brings (its children).
                    if let child {
                        out += try dropReferences(to: child, values: row, depth: depth + 1, seen: &seen)
                        out += try pendingDeleteActions(parent: child, values: row, depth: depth + 1, seen: &seen)
                    }
                    try cached("DELETE FROM " + quoteIdentifier(childDef.name) + " WHERE " + whereKey).run(keyValues)
                }
            }
        }
        return out
    }
}
