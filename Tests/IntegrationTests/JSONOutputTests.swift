import Foundation
import RTSyncTestSupport
import Testing

/// Every command's `--json` output against docs/json.md: each key printed is documented with its type, each key
/// documented as always present is there, and the shape (object or array) is the documented one.
@Suite(.serialized) struct JSONOutputTests {
    /// A documented type: key -> (type text, always present).
    typealias DocType = [String: (type: String, always: Bool)]

    struct Doc {
        var commands: [String: String] = [:]  // "backup list" -> "array of `Backup`"
        var types: [String: DocType] = [:]
    }

    /// Parses docs/json.md: `### \`rtsync CMD\`` sections with a `Prints:` line, `### Type: NAME` sections with a table.
    static func loadDoc() throws -> Doc {
        let text = try String(contentsOf: RTSyncBinary.packageRoot.appendingPathComponent("docs/json.md"), encoding: .utf8)
        var doc = Doc()
        var command: String?
        var type: String?
        for line in text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init) {
            if line.hasPrefix("### `rtsync ") {
                command = String(line.dropFirst("### `rtsync ".count).prefix { $0 != "`" }); type = nil
            } else if line.hasPrefix("### Type: ") {
                type = String(line.dropFirst("### Type: ".count)).trimmingCharacters(in: .whitespaces); command = nil
                doc.types[type!] = [:]
            } else if line.hasPrefix("#") {
                command = nil; type = nil
            } else if let c = command, line.hasPrefix("Prints: ") {
                doc.commands[c] = String(line.dropFirst("Prints: ".count).prefix { $0 != "(" }).trimmingCharacters(in: .whitespaces)
            } else if let t = type, line.hasPrefix("| `") {
                let cells = line.split(separator: "|").map { $0.trimmingCharacters(in: .whitespaces) }
                guard cells.count >= 3 else { continue }
                let key = cells[0].trimmingCharacters(in: CharacterSet(charactersIn: "`"))
                doc.types[t]![key] = (cells[1], cells[2] == "yes")
            }
        }
        return doc
    }

    /// A parsed JSON value that keeps booleans, integers and other numbers apart (JSONDecoder is strict about them).
    indirect enum JSON: Decodable {
        case bool(Bool), integer(Int64), number(Double), string(String), array([JSON]), object([String: JSON]), null

        init(from decoder: Decoder) throws {
            let c = try decoder.singleValueContainer()
            if c.decodeNil() { self = .null }
            else if let v = try? c.decode(Bool.self) { self = .bool(v) }
            else if let v = try? c.decode(Int64.self) { self = .integer(v) }
            else if let v = try? c.decode(Double.self) { self = .number(v) }
            else if let v = try? c.decode(String.self) { self = .string(v) }
            else if let v = try? c.decode([JSON].self) { self = .array(v) }
            else { self = .object(try c.decode([String: JSON].self)) }
        }
    }

    /// Checks `value` against a documented type text ("string", "array of `Backup`", "`Phase`", ...).
    static func check(_ value: JSON, against typeText: String, doc: Doc, path: String, problems: inout [String]) {
        if typeText.hasPrefix("array of ") {
            guard case .array(let array) = value else { problems.append("\(path): expected an array, got \(value)"); return }
            let element = String(typeText.dropFirst("array of ".count))
            for (i, item) in array.enumerated() { check(item, against: element, doc: doc, path: "\(path)[\(i)]", problems: &problems) }
            return
        }
        if typeText.hasPrefix("`") {
            let name = typeText.trimmingCharacters(in: CharacterSet(charactersIn: "`"))
            guard let type = doc.types[name] else { problems.append("\(path): type \(name) is not documented"); return }
            guard case .object(let object) = value else { problems.append("\(path): expected a \(name) object, got \(value)"); return }
            for (key, item) in object {
                guard let documented = type[key] else { problems.append("\(path).\(key): not documented in \(name)"); continue }
                check(item, against: documented.type, doc: doc, path: "\(path).\(key)", problems: &problems)
            }
            for (key, documented) in type where documented.always && object[key] == nil {
                problems.append("\(path).\(key): documented as always present in \(name), missing")
            }
            return
        }
        let ok: Bool
        switch (typeText, value) {
        case ("string", .string), ("boolean", .bool), ("integer", .integer), ("number", .integer), ("number", .number),
             ("object", .object), ("any", _): ok = true
        case ("string", _), ("boolean", _), ("integer", _), ("number", _), ("object", _): ok = false
        default: problems.append("\(path): unknown documented type '\(typeText)'"); return
        }
        if !ok { problems.append("\(path): expected \(typeText), got \(value)") }
    }

    /// Runs `rtsync` with `args`, requires exit 0 and JSON output, and checks it against the documented command.
    func run(_ command: String, _ args: [String], doc: Doc, seen: inout Set<String>, environment: [String: String] = [:],
             sourceLocation: SourceLocation = #_sourceLocation) async throws {
        let r = try await ltRTSync(args + ["--json"], environment: environment)
        #expect(r.status == 0, "rtsync \(args.joined(separator: " ")) --json failed: \(r.stderr)", sourceLocation: sourceLocation)
        let value = try JSONDecoder().decode(JSON.self, from: Data(r.stdout.utf8))
        let shape = try #require(doc.commands[command], "`rtsync \(command)` is not documented in docs/json.md", sourceLocation: sourceLocation)
        var problems: [String] = []
        Self.check(value, against: shape, doc: doc, path: command, problems: &problems)
        #expect(problems.isEmpty, "rtsync \(command) --json: \(problems.joined(separator: "; "))", sourceLocation: sourceLocation)
        seen.insert(command)
    }

    @Test func everyCommandsJSON_matchesDocsJsonMd_keysTypesAndShape() async throws {
        let doc = try Self.loadDoc()
        #expect(doc.commands.count >= 25 && doc.types.count >= 20, "docs/json.md did not parse: \(doc.commands.count) commands, \(doc.types.count) types")
        let dir = try TemporaryDirectory()
        let a = dir.file("a").path, b = dir.file("b").path, bucket = dir.file("bucket").path
        var seen = Set<String>()

        try await run("init", ["init", "--home", a, "--bucket", bucket], doc: doc, seen: &seen)
        let status = try jsonObject(try await ltRTSync(["status", "--home", a, "--json"]).stdout)
        let user = try #require(status["userId"] as? String)
        try await run("sync", ["sync", "--home", a], doc: doc, seen: &seen)
        _ = try await ltRTSync(["init", "--home", b, "--bucket", bucket, "--user", user])
        // A conflict: both devices change one row's title; media on one side.
        let dbA = a + "/support/primary.sqlite", dbB = b + "/support/primary.sqlite"
        try sqliteShell(dbA, "UPDATE things SET title = 'from a' WHERE rowid = (SELECT min(rowid) FROM things)")
        try sqliteShell(dbB, "UPDATE things SET title = 'from b' WHERE rowid = (SELECT min(rowid) FROM things)")
        try FileManager.default.createDirectory(atPath: a + "/documents/images", withIntermediateDirectories: true)
        try Data("picture".utf8).write(to: URL(fileURLWithPath: a + "/documents/images/p.txt"))
        try await run("sync", ["sync", "--home", a, "--media"], doc: doc, seen: &seen)
        try await run("sync", ["sync", "--home", b, "--media"], doc: doc, seen: &seen)
        try await run("status", ["status", "--home", b], doc: doc, seen: &seen)
        try await run("track", ["track", "--db", dbB, "--all"], doc: doc, seen: &seen)
        try await run("conflicts list", ["conflicts", "list", "--db", dbB], doc: doc, seen: &seen)
        let conflicts = try JSONSerialization.jsonObject(with: Data(try await ltRTSync(["conflicts", "list", "--db", dbB, "--json"]).stdout.utf8)) as? [[String: Any]]
        let conflictID = try #require(conflicts?.first?["id"] as? Int, "the scenario should log a conflict on b")
        try await run("conflicts show", ["conflicts", "show", "--db", dbB, String(conflictID)], doc: doc, seen: &seen)
        try await run("conflicts restore", ["conflicts", "restore", "--db", dbB, String(conflictID)], doc: doc, seen: &seen)
        try await run("conflicts media", ["conflicts", "media", "--home", a], doc: doc, seen: &seen)
        try await run("compact", ["compact", "--home", a], doc: doc, seen: &seen)
        try await run("backup create", ["backup", "create", "--home", a], doc: doc, seen: &seen)
        try await run("backup list", ["backup", "list", "--home", a], doc: doc, seen: &seen)
        try await run("backup verify", ["backup", "verify", "--home", a], doc: doc, seen: &seen)
        try await run("backup restore", ["backup", "restore", "--home", a], doc: doc, seen: &seen)

        let out = dir.file("diffs").path
        try sqliteShell(dbB, "UPDATE things SET title = 'later' WHERE rowid = (SELECT max(rowid) FROM things)")
        try await run("diff create", ["diff", "create", "--db", dbB, "--out", out], doc: doc, seen: &seen)
        let file = try #require(try FileManager.default.contentsOfDirectory(atPath: out).first { $0.hasSuffix(".sqlite") })
        try await run("diff inspect", ["diff", "inspect", out + "/" + file], doc: doc, seen: &seen)
        try await run("diff apply", ["diff", "apply", "--db", dbA, out + "/" + file], doc: doc, seen: &seen)
        try await run("ksuid inspect", ["ksuid", "inspect", String(file.dropLast(".sqlite".count))], doc: doc, seen: &seen)
        try await run("snapshot", ["snapshot", "--db", dbA, "--out", dir.file("snap").path], doc: doc, seen: &seen)
        try await run("share", ["share", "--home", a, "--to", "friend", "--table", "things", "--where", "1"], doc: doc, seen: &seen)
        try await run("inbound list", ["inbound", "list", "--home", a], doc: doc, seen: &seen)
        try await run("keys show", ["keys", "show", "--home", a], doc: doc, seen: &seen)
        #expect(try await ltRTSync(["keys", "create", "--home", a]).status == 0)
        try await run("keys share-key", ["keys", "share-key", "--home", a], doc: doc, seen: &seen)
        try await run("ksuid new", ["ksuid", "new", "--count", "3"], doc: doc, seen: &seen)

        let local = dir.file("f.txt")
        try Data("object".utf8).write(to: local)
        try await run("bucket put", ["bucket", "put", "--home", a, local.path, "tmp/f.txt"], doc: doc, seen: &seen)
        try await run("bucket ls", ["bucket", "ls", "--home", a], doc: doc, seen: &seen)
        try await run("bucket get", ["bucket", "get", "--home", a, "tmp/f.txt", dir.file("g.txt").path], doc: doc, seen: &seen)
        // Presigning needs credentials, not a server.
        try await run("bucket presign", ["bucket", "presign", "s3://some-bucket/some/key"], doc: doc, seen: &seen,
                      environment: ["AWS_ACCESS_KEY_ID": "AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY": "secret", "AWS_REGION": "us-east-1"])
        try await run("media sync", ["media", "sync", "--home", b], doc: doc, seen: &seen)
        try await run("media restore", ["media", "restore", "--home", b, "--list"], doc: doc, seen: &seen)
        try await run("media fetch", ["media", "fetch", "--cache", dir.file("cache").path, local.absoluteString], doc: doc, seen: &seen)

        #expect(Set(doc.commands.keys).subtracting(seen).isEmpty, "documented commands this test does not run: \(Set(doc.commands.keys).subtracting(seen).sorted())")
    }

    @Test func inspectCommands_printAnArray_forOneArgumentAsForSeveral() async throws {
        let one = try await ltRTSync(["ksuid", "inspect", "0ujtsYcgvSTl8PAuAdqWYSMnLOv", "--json"])
        let two = try await ltRTSync(["ksuid", "inspect", "0ujtsYcgvSTl8PAuAdqWYSMnLOv", "0ujzPyRiIAffKhBux4PvQdDqMHY", "--json"])
        #expect((try JSONSerialization.jsonObject(with: Data(one.stdout.utf8)) as? [Any])?.count == 1)
        #expect((try JSONSerialization.jsonObject(with: Data(two.stdout.utf8)) as? [Any])?.count == 2)
    }

}
