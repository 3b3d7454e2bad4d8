import Foundation
import Testing
@testable import BucketClient

/// The AWS credential chain against a temporary HOME: environment, shared files with profiles, credential_process.
@Suite struct CredentialChainTests {
    /// A temporary HOME with optional `~/.aws/credentials` and `~/.aws/config`.
    func home(credentials: String? = nil, config: String? = nil) throws -> URL {
        let home = try makeTemporaryFolder()
        let aws = home.appendingPathComponent(".aws", isDirectory: true)
        try FileManager.default.createDirectory(at: aws, withIntermediateDirectories: true)
        if let credentials { try Data(credentials.utf8).write(to: aws.appendingPathComponent("credentials")) }
        if let config { try Data(config.utf8).write(to: aws.appendingPathComponent("config")) }
        return home
    }

    @Test func environmentVariables_winOverTheSharedFiles() throws {
        let home = try home(credentials: "[default]\naws_access_key_id = FILEKEY\naws_secret_access_key = FILESECRET\n")
        let found = try AWSCredentialChain(environment: ["HOME": home.path, "AWS_ACCESS_KEY_ID": "ENVKEY",
                                                         "AWS_SECRET_ACCESS_KEY": "ENVSECRET"]).resolve()
        #expect(found.credentials == AWSCredentials(accessKeyId: "ENVKEY", secretAccessKey: "ENVSECRET"))
        #expect(found.source == "environment")
    }

    @Test func defaultProfile_inCredentialsFile_withRegionFromConfig() throws {
        let home = try home(credentials: """
            # comment
            [default]
            aws_access_key_id = AKIDDEFAULT
            aws_secret_access_key = secret/with+chars=
            aws_session_token = TOKEN

            [other]
            aws_access_key_id = NOPE
            aws_secret_access_key = NOPE
            """, config: "[default]\nregion = eu-central-1\ns3 =\n  addressing_style = path\n")
        let environment = ["HOME": home.path]
        let found = try AWSCredentialChain(environment: environment).resolve()
        #expect(found.credentials == AWSCredentials(accessKeyId: "AKIDDEFAULT", secretAccessKey: "secret/with+chars=", sessionToken: "TOKEN"))
        #expect(found.region == "eu-central-1")
        let configuration = try S3Configuration.fromEnvironment(bucket: "b", environment: environment)
        #expect(configuration.credentials?.accessKeyId == "AKIDDEFAULT")
        #expect(configuration.region == "eu-central-1")
        #expect(configuration.endpoint.host == "s3.eu-central-1.amazonaws.com")
    }

    @Test func awsProfile_picksItsSection_andConfigUsesProfilePrefix() throws {
        let home = try home(credentials: "[default]\naws_access_key_id = D\naws_secret_access_key = D\n[work]\naws_access_key_id = WORK\naws_secret_access_key = WORKSECRET\n",
                            config: "[default]\nregion = us-west-1\n[profile work]\nregion = eu-west-2\n")
        let environment = ["HOME": home.path, "AWS_PROFILE": "work"]
        let found = try AWSCredentialChain(environment: environment).resolve()
        #expect(found.credentials?.accessKeyId == "WORK")
        #expect(found.region == "eu-west-2")
        // The region variables still come first.
        let configuration = try S3Configuration.fromEnvironment(bucket: "b", environment: environment.merging(["AWS_REGION": "ap-south-1"]) { a, _ in a })
        #expect(configuration.region == "ap-south-1")
    }

    @Test func filesNamedByVariables_andKeysOnlyInConfig_areUsed() throws {
        let folder = try makeTemporaryFolder()
        let config = folder.appendingPathComponent("my-config")
        try Data("[profile ci]\naws_access_key_id = CIKEY\naws_secret_access_key = CISECRET\nregion = sa-east-1\nendpoint_url = http://127.0.0.1:9000\n".utf8).write(to: config)
        let environment = ["HOME": try home().path, "AWS_CONFIG_FILE": config.path, "AWS_PROFILE": "ci",
                           "AWS_SHARED_CREDENTIALS_FILE": folder.appendingPathComponent("absent").path]
        let found = try AWSCredentialChain(environment: environment).resolve()
        #expect(found.credentials == AWSCredentials(accessKeyId: "CIKEY", secretAccessKey: "CISECRET"))
        let configuration = try S3Configuration.fromEnvironment(bucket: "b", environment: environment)
        #expect(configuration.region == "sa-east-1")
        #expect(configuration.endpoint.absoluteString == "http://127.0.0.1:9000")
        #expect(configuration.addressingStyle == .path)
    }

    @Test func credentialProcess_isRun_andItsJSONParsed() throws {
        let folder = try makeTemporaryFolder()
        let script = folder.appendingPathComponent("creds.sh")
        try Data("#!/bin/sh\necho '{\"Version\": 1, \"AccessKeyId\": \"PROCKEY\", \"SecretAccessKey\": \"PROCSECRET\", \"SessionToken\": \"PROCTOKEN\", \"Expiration\": \"2099-01-01T00:00:00Z\"}'\n".utf8).write(to: script)
        let home = try home(config: "[profile proc]\ncredential_process = /bin/sh \"\(script.path)\" --profile proc\nregion = us-east-2\n")
        let found = try AWSCredentialChain(environment: ["HOME": home.path, "AWS_PROFILE": "proc"]).resolve()
        #expect(found.credentials == AWSCredentials(accessKeyId: "PROCKEY", secretAccessKey: "PROCSECRET", sessionToken: "PROCTOKEN"))
        #expect(found.source == "credential_process of profile proc")
    }

    @Test func failingCredentialProcess_throwsWithItsMessage() throws {
        let home = try home(config: "[default]\ncredential_process = sh -c 'echo token expired >&2; exit 3'\n")
        do {
            _ = try AWSCredentialChain(environment: ["HOME": home.path]).resolve()
            Issue.record("a failing credential_process was accepted")
        } catch let error as BucketError {
            guard case .credentialsUnavailable(let source, let reason) = error else { Issue.record("got \(error)"); return }
            #expect(source == "credential_process of profile default")
            #expect(reason.contains("status 3") && reason.contains("token expired"))
        }
    }

    @Test func unknownProfile_isAnErrorNamingIt() throws {
        let home = try home(credentials: "[default]\naws_access_key_id = D\naws_secret_access_key = D\n")
        #expect(throws: BucketError.self) { try AWSCredentialChain(environment: ["HOME": home.path, "AWS_PROFILE": "typo"]).resolve() }
        do { _ = try AWSCredentialChain(environment: ["HOME": home.path, "AWS_PROFILE": "typo"]).resolve() } catch {
            #expect("\(error)".contains("profile typo"))
        }
    }

    /// No credentials anywhere: the store refuses before sending anything, in one line, instead of unsigned requests.
    @Test func noCredentialsAnywhere_failsBeforeAnyRequest_withOneLine() async throws {
        let environment = ["HOME": try home().path, "AWS_ENDPOINT_URL": "http://127.0.0.1:9"]
        let store = try #require(try makeObjectStore(urlString: "s3://bucket/p", environment: environment) as? S3Store)
        #expect(store.configuration.credentials == nil)
        do {
            _ = try await store.list(prefix: "", startAfter: nil, maxKeys: nil, continuationToken: nil)
            Issue.record("an unsigned request was sent")
        } catch let error as BucketError {
            #expect(error.description == "no AWS credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or a profile in ~/.aws/credentials")
            #expect(error.hint == nil)
        }
        #expect(store.requestCounter.total == 0)
        // Unsigned requests only when asked for.
        let anonymous = try #require(try makeObjectStore(urlString: "s3://bucket/p", environment: environment.merging(["RTSYNC_S3_ANONYMOUS": "1"]) { a, _ in a }) as? S3Store)
        #expect(anonymous.configuration.allowsAnonymous)
    }
}
