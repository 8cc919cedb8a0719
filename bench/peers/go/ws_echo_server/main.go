// Command ws_echo_server is the gorilla/websocket peer for xKit's WebSocket
// benchmarks: /ws echoes every message as it came; /ping
// answers "pong" (how xkbench sees it serving). Usage: ws_echo_server PORT.
// GOMAXPROCS in the environment sets its cores.
package main

import (
	"log"
	"net/http"

	"github.com/gorilla/websocket"
	"xkit.dev/bench/go/internal/routes"
)

var upgrader = websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }}

func echo(w http.ResponseWriter, r *http.Request) {
	ws, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	defer ws.Close()
	for {
		kind, data, err := ws.ReadMessage()
		if err != nil {
			return
		}
		if err := ws.WriteMessage(kind, data); err != nil {
			return
		}
	}
}

func main() {
	mux := http.NewServeMux()
	mux.HandleFunc("/ws", echo)
	mux.HandleFunc("/ping", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("pong")) })
	log.Fatal(http.ListenAndServe(routes.ListenAddress(), mux))
}
