import TopicStore

extension TopicStore.Options {
    /// For commands that write only auxiliary tables (keys, projects,
    /// credentials): the writer's in-memory state is not read at open.
    static var auxiliaryOnly: Self {
        var options = Self()
        options.preparesWriter = false
        return options
    }
}
