// Command ws_echo_server is the gorilla/websocket peer for xKit's WebSocket
// benchmarks: /ws echoes every message as it came; /ping
// answers "pong" (how xkbench sees it serving). Usage: ws_echo_server PORT.
// GOMAXPROCS in the environment sets its cores.
package main

import (
	"log"
	"net/http"

	"xkit.dev/bench/go/internal/routes"
	"xkit.dev/bench/go/internal/wsecho"
)

func main() {
	mux := http.NewServeMux()
	mux.HandleFunc("/ws", wsecho.Handler)
	mux.HandleFunc("/ping", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("pong")) })
	log.Fatal(http.ListenAndServe(routes.ListenAddress(), mux))
}
