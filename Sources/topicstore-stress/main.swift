// A load generator for crash tests: concurrent writers submit commands to the
// store and print one line per acknowledged (durable) command:
//   ack SEQ DEVICE_ID
// The test kills this process with SIGKILL at random moments and then checks
// that every acknowledged command is in the log.
import Foundation
import SubscriptionLog
import TopicStore

let args = CommandLine.arguments
guard args.count >= 3, let writers = Int(args[2]) else {
    FileHandle.standardError.write(Data("usage: topicstore-stress DIR WRITERS [PREFIX] [MAPSIZE]\n".utf8))
    exit(2)
}
let prefix = args.count > 3 ? args[3] : "run"
var options = TopicStore.Options()
if args.count > 4, let size = Int(args[4]) { options.initialMapSize = size }
let store = try TopicStore(directory: args[1], options: options)
let out = FileHandle.standardOutput
let outLock = NSLock()

await withTaskGroup(of: Void.self) { group in
    for w in 0..<writers {
        group.addTask {
            var i = 0
            while true {
                let device = "\(prefix)-\(w)-\(i)"
                let events = [
                    Event(project: "crash", body: .token(deviceID: device, token: "tok-\(device)", platform: i % 3 == 0 ? .android : .ios)),
                    Event(project: "crash", body: .register(deviceID: device, topics: [TopicSpec(code: "all"), TopicSpec(code: "w\(w)"),
                                                                                          TopicSpec(code: "user.\(device)", single: true)])),
                ]
                for event in events {
                    guard let receipt = try? await store.submit(event) else { continue }
                    let line = "ack \(receipt.sequence) \(device)\n"
                    outLock.withLock { out.write(Data(line.utf8)) }
                }
                if i % 5 == 4 {
                    let old = "\(prefix)-\(w)-\(i - 2)"
                    if let r = try? await store.submit(Event(project: "crash", body: .unregister(deviceID: old, codes: ["w\(w)"]))) {
                        outLock.withLock { out.write(Data("ack \(r.sequence) \(old)\n".utf8)) }
                    }
                }
                i += 1
            }
        }
    }
}
