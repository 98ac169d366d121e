print("topicstore")
