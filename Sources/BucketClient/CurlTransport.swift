import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
#if canImport(CCurlShim)
import CCurlShim
#endif

/// Sends requests through libcurl directly (Linux), bypassing URLSession's dispatch-driven event loop, which kept a
/// core busy for as long as a request was in flight: the client spent more CPU per uploaded byte than the (Python)
/// test server took to receive it, and a pull of many small objects more CPU than the server serving them.
///
/// Used by ``S3Store`` for every request (see ``S3Configuration/directTransportMinimumBody``); a download to a file
/// can have its body written into the file as it arrives (``send(_:body:timeout:into:)``). Answers are turned into
/// the same `(Data, HTTPURLResponse)` pairs URLSession gives, and libcurl errors into
/// `URLError`s, so signing, retries and error mapping are shared. Unavailable on Apple platforms, and when libcurl
/// cannot be loaded: callers then use URLSession.
enum CurlTransport {
    /// Requests sent through libcurl in this process, by HTTP method (for tests).
    static let sent = RequestCounter()

    /// Whether requests can go through libcurl directly in this process.
    static var isAvailable: Bool {
        #if canImport(CCurlShim)
        return rtsync_curl_available() == 1
        #else
        return false
        #endif
    }

    /// Where a 2xx answer's body is written as it arrives: a file descriptor open for writing, and the file offset
    /// of the body's first byte.
    struct FileTarget: Sendable {
        var fd: Int32
        var offset: Int64
        /// Sees every byte that reaches the file (hashing a download as it arrives); nil for none.
        var written: Hashing.WrittenBytes? = nil
    }

    /// Sends `request` (method, URL, headers) with `body`, on a thread of its own so no Swift concurrency thread
    /// blocks; cancelling the calling task aborts the transfer. With `into`, the body of a 2xx answer is written into
    /// that file (and not returned): the third value is how many bytes were written there. Other answers' bodies
    /// (error documents) are returned as usual.
    static func send(_ request: URLRequest, body: Data, timeout: TimeInterval, into target: FileTarget?) async throws -> (Data, HTTPURLResponse, Int64) {
        #if canImport(CCurlShim)
        guard let url = request.url else { throw URLError(.badURL) }
        let method = request.httpMethod ?? "GET"
        sent.record(method)
        let headers = (request.allHTTPHeaderFields ?? [:]).map { "\($0.key): \($0.value)" }
        let cancel = CancelFlag()
        let timeoutMs = max(1, Int(timeout * 1000))
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<(Data, HTTPURLResponse, Int64), Error>) in
                let thread = Thread {
                    continuation.resume(with: Result {
                        try perform(method: method, url: url, headers: headers, body: body, timeoutMs: timeoutMs, cancel: cancel, into: target)
                    })
                }
                thread.stackSize = 1 << 20
                thread.start()
            }
        } onCancel: {
            cancel.set()
        }
        #else
        throw URLError(.unsupportedURL)
        #endif
    }

    #if canImport(CCurlShim)
    /// A flag libcurl's progress callback polls from the transfer thread.
    final class CancelFlag: @unchecked Sendable {
        let pointer: UnsafeMutablePointer<Int32>
        init() {
            pointer = .allocate(capacity: 1)
            pointer.initialize(to: 0)
        }
        deinit { pointer.deallocate() }
        func set() { pointer.pointee = 1 }
    }

    static func perform(method: String, url: URL, headers: [String], body: Data, timeoutMs: Int,
                        cancel: CancelFlag, into target: FileTarget?) throws -> (Data, HTTPURLResponse, Int64) {
        var result = rtsync_curl_result()
        let cHeaders = headers.map { strdup($0) }
        defer { cHeaders.forEach { free($0) } }
        // The observer stays alive through the call: `target` holds it.
        let context = target?.written.map { Unmanaged.passUnretained($0).toOpaque() }
        let written: rtsync_curl_written? = context == nil ? nil : { context, bytes, length, offset in
            guard let context, let bytes else { return }
            Unmanaged<Hashing.WrittenBytes>.fromOpaque(context).takeUnretainedValue()
                .wrote(UnsafeRawBufferPointer(start: bytes, count: length), at: offset)
        }
        let status: Int32 = cHeaders.map { UnsafePointer($0) }.withUnsafeBufferPointer { list in
            body.withUnsafeBytes { bytes in
                rtsync_curl_perform(method, url.absoluteString, list.baseAddress, list.count, bytes.baseAddress, bytes.count,
                                    timeoutMs, cancel.pointer, target?.fd ?? -1, target?.offset ?? 0, written, context, &result)
            }
        }
        defer { rtsync_curl_result_free(&result) }
        guard status == 0 else { throw URLError(.unsupportedURL) }
        if result.write_errno != 0 {
            // The local file could not take the bytes (disk full, ...): not a network failure, never retried as one.
            throw BucketError.localIO(path: "file descriptor \(target?.fd ?? -1)", description: String(cString: strerror(result.write_errno)))
        }
        if result.curl_code != 0 {
            let text = withUnsafeBytes(of: result.error) { String(decoding: $0.prefix(while: { $0 != 0 }), as: UTF8.self) }
            throw URLError(urlErrorCode(curlCode: result.curl_code), userInfo: [NSLocalizedDescriptionKey: "libcurl: \(text)"])
        }
        let headerText = result.headers.map { String(decoding: UnsafeRawBufferPointer(start: $0, count: result.headers_length), as: UTF8.self) } ?? ""
        var fields: [String: String] = [:]
        for line in headerText.split(whereSeparator: { $0 == "\r\n" || $0 == "\n" }).dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { continue }
            let name = String(line[..<colon]).trimmingCharacters(in: .whitespaces)
            let value = String(line[line.index(after: colon)...]).trimmingCharacters(in: .whitespaces)
            fields[name] = fields[name].map { $0 + ", " + value } ?? value
        }
        let data = result.body.map { Data(bytes: $0, count: result.body_length) } ?? Data()
        guard let response = HTTPURLResponse(url: url, statusCode: Int(result.status), httpVersion: "HTTP/1.1", headerFields: fields) else {
            throw URLError(.badServerResponse)
        }
        return (data, response, result.streamed_length)
    }

    /// The URLError of a CURLcode, so RetryPolicy treats libcurl's failures like URLSession's.
    static func urlErrorCode(curlCode: Int32) -> URLError.Code {
        switch curlCode {
        case 6: return .cannotFindHost                      // COULDNT_RESOLVE_HOST
        case 7: return .cannotConnectToHost                 // COULDNT_CONNECT
        case 28: return .timedOut                           // OPERATION_TIMEDOUT
        case 42: return .cancelled                          // ABORTED_BY_CALLBACK
        case 52, 55, 56: return .networkConnectionLost      // GOT_NOTHING, SEND_ERROR, RECV_ERROR
        // HTTP2 (framing), HTTP2_STREAM, SEND_FAIL_REWIND, SSL_CONNECT_ERROR (often a reset mid-handshake):
        // transient like a dropped connection, so retried.
        case 16, 92, 65, 35: return .networkConnectionLost
        case 8, 18: return .badServerResponse               // WEIRD_SERVER_REPLY, PARTIAL_FILE
        case 58, 59, 60, 77, 83, 90, 91: return .secureConnectionFailed   // certificate and TLS setup problems
        default: return .unknown
        }
    }
    #endif
}
