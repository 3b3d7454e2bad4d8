import Foundation
import Testing

/// Every Swift code block of the DocC articles is code the example package compiles (and CI builds and runs), so an
/// article cannot show code that no longer builds (issue 18).
@Suite struct DocumentationSnippetTests {
    static let root = RTSyncBinary.packageRoot

    /// The ```swift blocks of a Markdown file, each as its lines.
    static func swiftBlocks(_ text: String) -> [[String]] {
        var blocks: [[String]] = []
        var current: [String]?
        for line in text.components(separatedBy: "\n") {
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            if current == nil, trimmed == "```swift" { current = []; continue }
            if current != nil, trimmed == "```" { blocks.append(current!); current = nil; continue }
            current?.append(line)
        }
        return blocks
    }

    /// Lines without indentation, trailing blanks or empty lines (articles indent code less than sources do).
    static func normalized(_ lines: [String]) -> [String] {
        lines.map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
    }

    static func files(under folder: URL, ending suffix: String) -> [URL] {
        let walker = FileManager.default.enumerator(at: folder, includingPropertiesForKeys: nil)
        return (walker?.allObjects as? [URL] ?? []).filter { $0.lastPathComponent.hasSuffix(suffix) && !$0.path.contains("/.build") }
    }

    @Test func everySwiftBlockOfTheArticles_appearsVerbatimInTheExamplePackage() throws {
        let articles = Self.files(under: Self.root.appendingPathComponent("Sources"), ending: ".md").filter { $0.path.contains(".docc/") }
        #expect(articles.count >= 10, "found \(articles.map(\.lastPathComponent))")
        let example = Self.root.appendingPathComponent("Examples")
        var corpus: [[String]] = []
        for file in Self.files(under: example, ending: ".swift") {
            corpus.append(Self.normalized(try String(contentsOf: file, encoding: .utf8).components(separatedBy: "\n")))
        }
        #expect(corpus.count >= 4)
        var checked = 0
        for article in articles {
            for block in Self.swiftBlocks(try String(contentsOf: article, encoding: .utf8)) {
                let wanted = Self.normalized(block)
                guard !wanted.isEmpty else { continue }
                let found = corpus.contains { lines in
                    lines.count >= wanted.count && (0...(lines.count - wanted.count)).contains { Array(lines[$0..<($0 + wanted.count)]) == wanted }
                }
                #expect(found, "\(article.lastPathComponent): this block is not in Examples/ (copy it there so it compiles):\n\(block.joined(separator: "\n"))")
                checked += 1
            }
        }
        #expect(checked >= 12, "only \(checked) Swift blocks found in the articles")
    }

    @Test func blockExtraction_findsOnlySwiftFences() {
        let text = "intro\n```swift\nlet a = 1\n```\n```text\nnot swift\n```\n  ```swift\n  b()\n  ```\n"
        #expect(Self.swiftBlocks(text) == [["let a = 1"], ["  b()"]])
    }
}
