module xkit.dev/bench/go

go 1.26.0

require (
	github.com/gorilla/websocket v1.5.3
	golang.org/x/net v0.62.0
)

require golang.org/x/text v0.43.0 // indirect
