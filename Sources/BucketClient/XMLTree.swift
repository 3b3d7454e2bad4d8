import Foundation
#if canImport(FoundationXML)
import FoundationXML
#endif

/// A tiny element tree built with `XMLParser`, enough for S3's responses.
struct XMLElementNode: Sendable {
    var name: String
    var text: String = ""
    var children: [XMLElementNode] = []

    func child(_ name: String) -> XMLElementNode? { children.first { $0.name == name } }
    func all(_ name: String) -> [XMLElementNode] { children.filter { $0.name == name } }
    func string(_ name: String) -> String? { child(name)?.text }

    /// This element when one of `names` is among its children, else the first descendant (depth first) that has one.
    ///
    /// S3 servers disagree on root names (`InitiateMultipartUpload` for `InitiateMultipartUploadResult`, a
    /// `...Response` wrapping a `...Result`); like the AWS SDKs, callers look for the fields, not the root.
    func holder(ofAny names: [String]) -> XMLElementNode? {
        if children.contains(where: { names.contains($0.name) }) { return self }
        for child in children {
            if let found = child.holder(ofAny: names) { return found }
        }
        return nil
    }

    /// Parses `data`; nil when it is not well-formed XML.
    static func parse(_ data: Data) -> XMLElementNode? {
        let parser = XMLParser(data: data)
        let builder = Builder()
        parser.delegate = builder
        parser.shouldProcessNamespaces = false
        parser.shouldResolveExternalEntities = false
        guard parser.parse(), builder.failed == false, let root = builder.root else { return nil }
        return root
    }

    private final class Builder: NSObject, XMLParserDelegate {
        var stack: [XMLElementNode] = []
        var root: XMLElementNode?
        var failed = false

        func parser(_ parser: XMLParser, didStartElement elementName: String, namespaceURI: String?,
                    qualifiedName qName: String?, attributes attributeDict: [String: String] = [:]) {
            stack.append(XMLElementNode(name: elementName))
        }

        func parser(_ parser: XMLParser, foundCharacters string: String) {
            guard !stack.isEmpty else { return }
            stack[stack.count - 1].text += string
        }

        func parser(_ parser: XMLParser, didEndElement elementName: String, namespaceURI: String?,
                    qualifiedName qName: String?) {
            guard let node = stack.popLast() else { failed = true; return }
            if stack.isEmpty { root = node } else { stack[stack.count - 1].children.append(node) }
        }

        func parser(_ parser: XMLParser, parseErrorOccurred parseError: Error) { failed = true }
    }
}
