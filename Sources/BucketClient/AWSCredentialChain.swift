import Foundation

/// Finds AWS credentials and region as the AWS SDKs do off AWS infrastructure: environment variables, then the
/// shared credentials and config files (with profiles), then the profile's `credential_process`.
///
/// Follows <https://docs.aws.amazon.com/sdkref/latest/guide/file-format.html> and
/// <https://docs.aws.amazon.com/sdkref/latest/guide/feature-process-credentials.html>. Everything is read from the
/// given environment (including `HOME`), so a test can point it at a temporary home.
public struct AWSCredentialChain: Sendable {
    /// What the chain found.
    public struct Resolution: Sendable {
        /// The credentials, or nil when no source had any.
        public var credentials: AWSCredentials?
        /// Where they came from, for messages: `environment`, `profile work in /home/me/.aws/credentials`, ...
        public var source: String?
        /// The profile's `region` from the config file, if any (the `AWS_REGION` variables take precedence).
        public var region: String?
        /// The profile's `endpoint_url` from the config file, if any (`AWS_ENDPOINT_URL` takes precedence).
        public var endpointURL: String?
    }

    /// The variables read: `AWS_*` and `HOME`.
    public var environment: [String: String]

    /// Creates a chain over `environment` (by default the process's).
    public init(environment: [String: String] = ProcessInfo.processInfo.environment) {
        self.environment = environment
    }

    /// The profile in use: `AWS_PROFILE`, else `AWS_DEFAULT_PROFILE`, else `default`.
    public var profileName: String {
        value("AWS_PROFILE") ?? value("AWS_DEFAULT_PROFILE") ?? "default"
    }

    /// Runs the chain.
    /// - Throws: ``BucketError/credentialsUnavailable(source:reason:)`` when `AWS_PROFILE` names a profile no file
    ///   has, or the profile's `credential_process` fails or prints something other than credentials.
    public func resolve() throws -> Resolution {
        var resolution = Resolution()
        let profile = profileName
        let credentialsPath = path("AWS_SHARED_CREDENTIALS_FILE", default: ".aws/credentials")
        let configPath = path("AWS_CONFIG_FILE", default: ".aws/config")
        let fromCredentials = credentialsPath.flatMap { Self.readINI(at: $0)?[profile] }
        // In the config file a profile is `[profile name]`; `[default]` (or `[profile default]`) for the default one.
        let configSections = configPath.flatMap { Self.readINI(at: $0) }
        let fromConfig = configSections?["profile " + profile] ?? (profile == "default" ? configSections?["default"] : nil)
        resolution.region = fromConfig?["region"].flatMap { $0.isEmpty ? nil : $0 }
        resolution.endpointURL = fromConfig?["endpoint_url"].flatMap { $0.isEmpty ? nil : $0 }

        if let credentials = AWSCredentials.fromEnvironment(environment) {
            resolution.credentials = credentials
            resolution.source = "environment"
            return resolution
        }
        if fromCredentials == nil && fromConfig == nil && (value("AWS_PROFILE") != nil || value("AWS_DEFAULT_PROFILE") != nil) {
            let files = [credentialsPath, configPath].compactMap { $0 }.joined(separator: " or ")
            throw BucketError.credentialsUnavailable(source: "profile \(profile)",
                                                     reason: "no such profile in \(files.isEmpty ? "the shared files (HOME is not set)" : files)")
        }
        if let section = fromCredentials, let credentials = Self.staticCredentials(section) {
            resolution.credentials = credentials
            resolution.source = "profile \(profile) in \(credentialsPath!)"
            return resolution
        }
        if let command = fromCredentials?["credential_process"] ?? fromConfig?["credential_process"], !command.isEmpty {
            resolution.credentials = try Self.runCredentialProcess(command, profile: profile, environment: environment)
            resolution.source = "credential_process of profile \(profile)"
            return resolution
        }
        if let section = fromConfig, let credentials = Self.staticCredentials(section) {
            resolution.credentials = credentials
            resolution.source = "profile \(profile) in \(configPath!)"
        }
        return resolution
    }

    // MARK: - Internals

    private func value(_ name: String) -> String? {
        environment[name].flatMap { $0.isEmpty ? nil : $0 }
    }

    /// The file a variable names (with `~/` expanded), else `$HOME/<relative>`; nil without either.
    private func path(_ variable: String, default relative: String) -> String? {
        let home = value("HOME")
        if let named = value(variable) {
            if named.hasPrefix("~/"), let home { return home + "/" + named.dropFirst(2) }
            return named
        }
        return home.map { $0 + "/" + relative }
    }

    static func staticCredentials(_ section: [String: String]) -> AWSCredentials? {
        guard let id = section["aws_access_key_id"], !id.isEmpty,
              let secret = section["aws_secret_access_key"], !secret.isEmpty else { return nil }
        let token = section["aws_session_token"].flatMap { $0.isEmpty ? nil : $0 }
        return AWSCredentials(accessKeyId: id, secretAccessKey: secret, sessionToken: token)
    }

    /// Sections of an AWS INI file, with lowercase keys; nil when the file cannot be read.
    ///
    /// Comment lines start with `#` or `;`; indented lines (the nested settings of `s3 =`) are skipped.
    static func readINI(at path: String) -> [String: [String: String]]? {
        guard let data = FileManager.default.contents(atPath: path) else { return nil }
        var sections: [String: [String: String]] = [:]
        var current: String? = nil
        for rawLine in String(decoding: data, as: UTF8.self).split(omittingEmptySubsequences: true, whereSeparator: \.isNewline) {
            if rawLine.first == " " || rawLine.first == "\t" { continue }
            let line = rawLine.trimmingCharacters(in: .whitespaces)
            if line.isEmpty || line.hasPrefix("#") || line.hasPrefix(";") { continue }
            if line.hasPrefix("[") && line.hasSuffix("]") {
                let name = line.dropFirst().dropLast().split(separator: " ", omittingEmptySubsequences: true).joined(separator: " ")
                current = name
                if sections[name] == nil { sections[name] = [:] }
                continue
            }
            guard let section = current, let equals = line.firstIndex(of: "=") else { continue }
            let key = line[..<equals].trimmingCharacters(in: .whitespaces).lowercased()
            let value = line[line.index(after: equals)...].trimmingCharacters(in: .whitespaces)
            sections[section]?[key] = value
        }
        return sections
    }

    /// Runs `credential_process` with `/bin/sh -c` (as the AWS SDK for Go does) and parses its JSON
    /// (`Version` 1, `AccessKeyId`, `SecretAccessKey`, optional `SessionToken`).
    static func runCredentialProcess(_ command: String, profile: String, environment: [String: String]) throws -> AWSCredentials {
        let source = "credential_process of profile \(profile)"
        #if os(macOS) || os(Linux)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/sh")
        process.arguments = ["-c", command]
        process.environment = environment
        let output = Pipe()
        let errors = Pipe()
        process.standardOutput = output
        process.standardError = errors
        process.standardInput = FileHandle.nullDevice
        do { try process.run() } catch {
            throw BucketError.credentialsUnavailable(source: source, reason: "cannot run \(command.debugDescription): \(error.localizedDescription)")
        }
        // Read both pipes to the end before waiting, so a chatty process cannot block on a full pipe.
        let errorData = LockedData()
        let errorRead = DispatchSemaphore(value: 0)
        Thread {
            errorData.set(errors.fileHandleForReading.readDataToEndOfFile())
            errorRead.signal()
        }.start()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        errorRead.wait()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            let text = String(decoding: errorData.value, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
            throw BucketError.credentialsUnavailable(source: source,
                                                     reason: "\(command.debugDescription) exited with status \(process.terminationStatus)\(text.isEmpty ? "" : ": " + text)")
        }
        struct Output: Decodable {
            var Version: Int
            var AccessKeyId: String
            var SecretAccessKey: String
            var SessionToken: String?
        }
        guard let parsed = try? JSONDecoder().decode(Output.self, from: data) else {
            throw BucketError.credentialsUnavailable(source: source, reason: "\(command.debugDescription) did not print JSON with Version, AccessKeyId and SecretAccessKey")
        }
        guard parsed.Version == 1 else {
            throw BucketError.credentialsUnavailable(source: source, reason: "unsupported Version \(parsed.Version) (only 1 is known)")
        }
        guard !parsed.AccessKeyId.isEmpty, !parsed.SecretAccessKey.isEmpty else {
            throw BucketError.credentialsUnavailable(source: source, reason: "empty AccessKeyId or SecretAccessKey")
        }
        return AWSCredentials(accessKeyId: parsed.AccessKeyId, secretAccessKey: parsed.SecretAccessKey,
                              sessionToken: parsed.SessionToken.flatMap { $0.isEmpty ? nil : $0 })
        #else
        throw BucketError.credentialsUnavailable(source: source, reason: "running a process is not available on this platform")
        #endif
    }
}

/// Bytes handed from a reader thread, under a lock.
private final class LockedData: @unchecked Sendable {
    private let lock = NSLock()
    private var data = Data()
    func set(_ value: Data) { lock.lock(); data = value; lock.unlock() }
    var value: Data { lock.lock(); defer { lock.unlock() }; return data }
}
