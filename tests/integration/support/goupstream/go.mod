module xkit.dev/tests/goupstream

go 1.26.0
