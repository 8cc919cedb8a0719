module xkit.dev/tests/h2goclient

go 1.26.0
