import Foundation
import Testing
@testable import BucketClient

/// The published examples of the S3 API reference (sig-v4-header-based-auth, sigv4-query-string-auth).
@Suite struct SigV4SignerTests {
    let signer = SigV4Signer(credentials: AWSCredentials(accessKeyId: "AKIAIOSFODNN7EXAMPLE",
                                                         secretAccessKey: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
                             region: "us-east-1")
    let date = Date(timeIntervalSince1970: 1_369_353_600)  // 20130524T000000Z
    let host = "examplebucket.s3.amazonaws.com"

    @Test func amzDate_formatsUTC() {
        #expect(SigV4Signer.amzDate(date) == "20130524T000000Z")
        #expect(SigV4Signer.amzDate(Date(timeIntervalSince1970: 1_795_782_807.999)) == "20261127T123327Z")
        #expect(SigV4Signer.amzDate(Date(timeIntervalSince1970: 951_782_400)) == "20000229T000000Z")
    }

    @Test func headerValues_trimmedAsTheSDKsTrimThem() {
        // botocore: ' '.join(value.split()) for these separators.
        let cases = ["": "", "a": "a", "a b": "a b", " a": "a", "a ": "a", "a  b": "a b", "  ": "", "a\tb": "a b",
                     "a\n b\r\n": "a b", "a\u{0B}\u{0C}b": "a b", "bytes=0-1023": "bytes=0-1023", "\"etag\"": "\"etag\"",
                     "x \u{00A0}y": "x \u{00A0}y"]
        for (value, trimmed) in cases { #expect(SigV4Signer.trimHeaderValue(value) == trimmed, "\(value.debugDescription)") }
    }

    @Test func getObjectWithRange_matchesAWSExample() {
        let signed = signer.sign(method: "GET", host: host, encodedPath: "/test.txt", headers: ["Range": "bytes=0-9"],
                                 payloadHash: SigV4Signer.emptyPayloadHash, date: date)
        #expect(signed.signature == "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41")
        #expect(signed.headers["authorization"] == "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41")
    }

    @Test func putObject_matchesAWSExample() {
        let body = Data("Welcome to Amazon S3.".utf8)
        let hash = Hashing.sha256Hex(body)
        #expect(hash == "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072")
        let signed = signer.sign(method: "PUT", host: host, encodedPath: "/" + SigV4Signer.encodePath("test$file.text"),
                                 headers: ["Date": "Fri, 24 May 2013 00:00:00 GMT", "x-amz-storage-class": "REDUCED_REDUNDANCY"],
                                 payloadHash: hash, date: date)
        #expect(signed.canonicalRequest.hasPrefix("PUT\n/test%24file.text\n"))
        #expect(signed.signature == "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd")
    }

    @Test func getBucketLifecycle_matchesAWSExample() {
        let signed = signer.sign(method: "GET", host: host, encodedPath: "/", query: ["lifecycle": ""],
                                 payloadHash: SigV4Signer.emptyPayloadHash, date: date)
        #expect(signed.signature == "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543")
    }

    @Test func listObjects_matchesAWSExample() {
        let signed = signer.sign(method: "GET", host: host, encodedPath: "/", query: ["max-keys": "2", "prefix": "J"],
                                 payloadHash: SigV4Signer.emptyPayloadHash, date: date)
        #expect(signed.signature == "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7")
    }

    @Test func presignedURL_matchesAWSExample() {
        let url = signer.presignedURL(method: "GET", scheme: "https", host: host, encodedPath: "/test.txt", expires: 86400, date: date)
        #expect(url.absoluteString == "https://examplebucket.s3.amazonaws.com/test.txt?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400&X-Amz-SignedHeaders=host&X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404")
    }

    /// Expected value computed with botocore's S3SigV4Auth (moto cannot check these keys).
    @Test func keyWithSpaceAtPlusPercentAndNonASCII_matchesBotocore() {
        let key = "dir a/c@d+e%f=g/é ü~.txt"
        let path = "/" + SigV4Signer.encodePath(key)
        #expect(path == "/dir%20a/c%40d%2Be%25f%3Dg/%C3%A9%20%C3%BC~.txt")
        let signed = signer.sign(method: "GET", host: host, encodedPath: path, payloadHash: SigV4Signer.emptyPayloadHash, date: date)
        #expect(signed.signature == "99075668dbd56793bc63ceddaed8186b21d936acba2ee5c37a01fc8ede506b7c")
    }

    /// Expected value computed with botocore's S3SigV4Auth, which trims and collapses every run of whitespace.
    @Test func headerValueWithTabsAndRunsOfSpaces_isTrimmedAndCollapsed_likeBotocore() {
        let headers = ["x-amz-meta-note": "\t  two  \t spaced\t\twords \t"]
        let signed = signer.sign(method: "GET", host: host, encodedPath: "/test.txt", headers: headers,
                                 payloadHash: SigV4Signer.emptyPayloadHash, date: date)
        #expect(signed.canonicalRequest.contains("\nx-amz-meta-note:two spaced words\n"))
        #expect(signed.signature == "92c65a7b9077a7200ba007ae555419a39d1c92fbedfd208ec4d676160c7b13d8")
        let clean = signer.sign(method: "GET", host: host, encodedPath: "/test.txt", headers: ["X-Amz-Meta-Note": "two spaced words"],
                                payloadHash: SigV4Signer.emptyPayloadHash, date: date)
        #expect(clean.signature == signed.signature)
    }

    @Test func sessionToken_isSignedAndSent() {
        var withToken = signer
        withToken.credentials.sessionToken = "TOKEN"
        let signed = withToken.sign(method: "GET", host: host, encodedPath: "/x", payloadHash: SigV4Signer.emptyPayloadHash, date: date)
        #expect(signed.headers["x-amz-security-token"] == "TOKEN")
        #expect(signed.headers["authorization"]!.contains("x-amz-security-token"))
    }

    @Test func credentialsDescription_neverShowsSecret() {
        #expect(!signer.credentials.description.contains("wJalr"))
        #expect(!String(describing: BucketError.accessDenied(request: "GET s3://b/k", hint: "x")).contains("wJalr"))
    }
}
