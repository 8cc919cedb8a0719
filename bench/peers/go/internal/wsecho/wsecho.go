// Package wsecho is the gorilla/websocket echo the Go peers serve on /ws
// (ws_echo_server for xkbench compare websocket, arena_server for the
// arena's echo-ws profiles): every message goes back as it came, in order.
package wsecho

import (
	"net/http"

	"github.com/gorilla/websocket"
)

// Any origin: the load generators send none that matters.
var upgrader = websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }}

// Handler upgrades the request and echoes until the connection ends.
func Handler(w http.ResponseWriter, r *http.Request) {
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
