import Foundation
import GRDB
import SyncEngine  // imported beside GRDB on purpose: the two must compile together in one file

/// The app's own database layer: a GRDB `DatabasePool` (WAL) with its own schema, as an app already has it.
struct AppDatabase {
    /// The pool the app reads and writes through.
    let pool: DatabasePool

    /// Opens (or creates) the app's database at `url` and migrates it.
    init(url: URL) throws {
        try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
        var configuration = Configuration()
        // rtsync's export and each applied diff are one write transaction: wait for them instead of failing.
        configuration.busyMode = .timeout(10)
        pool = try DatabasePool(path: url.path, configuration: configuration)
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1") { db in
            try db.create(table: "project") { t in
                t.primaryKey("id", .text)
                t.column("name", .text).notNull()
            }
            try db.create(table: "todo") { t in
                t.primaryKey("id", .text)
                t.column("projectId", .text).references("project", onDelete: .cascade)
                t.column("title", .text).notNull()
                t.column("done", .boolean).notNull().defaults(to: false)
            }
        }
        try migrator.migrate(pool)
    }

    /// Adds a project.
    func addProject(id: String, name: String) throws {
        try pool.write { try $0.execute(sql: "INSERT INTO project(id, name) VALUES (?, ?)", arguments: [id, name]) }
    }

    /// Adds a to-do item.
    func addTodo(id: String, project: String, title: String) throws {
        try pool.write { try $0.execute(sql: "INSERT INTO todo(id, projectId, title) VALUES (?, ?, ?)", arguments: [id, project, title]) }
    }

    /// Renames a to-do item.
    func rename(todo id: String, to title: String) throws {
        try pool.write { try $0.execute(sql: "UPDATE todo SET title = ? WHERE id = ?", arguments: [title, id]) }
    }

    /// Marks a to-do item done.
    func complete(todo id: String) throws {
        try pool.write { try $0.execute(sql: "UPDATE todo SET done = 1 WHERE id = ?", arguments: [id]) }
    }

    /// Deletes every to-do item (the mistake the backup undoes).
    func deleteAllTodos() throws {
        try pool.write { try $0.execute(sql: "DELETE FROM todo") }
    }

    /// Every to-do item as `id|title|done`, by id.
    func todos() throws -> [String] {
        try pool.read { db in
            try Row.fetchAll(db, sql: "SELECT id, title, done FROM todo ORDER BY id").map { row in
                "\(row["id"] as String)|\(row["title"] as String)|\(row["done"] as Bool)"
            }
        }
    }
}
