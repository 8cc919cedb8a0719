// Command h2c_bench_server serves cleartext HTTP/2 (prior knowledge or Upgrade)
// and HTTP/1.1 on one port through golang.org/x/net/http2/h2c.
// Usage: h2c_bench_server PORT. GOMAXPROCS in the environment sets its cores.
package main

import (
	"log"
	"net/http"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/h2c"

	"xkit.dev/bench/go/internal/routes"
)

func main() {
	h2 := &http2.Server{IdleTimeout: routes.IdleTimeout}
	server := &http.Server{
		Addr:        routes.ListenAddress(),
		Handler:     h2c.NewHandler(routes.NewHandler(), h2),
		IdleTimeout: routes.IdleTimeout,
	}
	log.Fatal(server.ListenAndServe())
}
