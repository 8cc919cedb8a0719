// Command http_bench_server is the net/http peer for xKit's HTTP/1.1 benchmarks.
// Usage: http_bench_server PORT. GOMAXPROCS in the environment sets its cores.
package main

import (
	"log"
	"net/http"

	"xkit.dev/bench/go/internal/routes"
)

func main() {
	server := &http.Server{
		Addr:        routes.ListenAddress(),
		Handler:     routes.NewHandler(),
		IdleTimeout: routes.IdleTimeout,
	}
	log.Fatal(server.ListenAndServe())
}
