// Command h3_bench_server serves the bench routes (GET /ping, POST /echo, ...) over HTTP/3 with
// quic-go, the peer `xkbench compare h3` measures xKit's HTTP/3 against.
// Usage: h3_bench_server PORT CERT KEY (UDP PORT on 127.0.0.1). GOMAXPROCS in the environment
// sets its cores.
package main

import (
	"crypto/tls"
	"log"
	"os"

	"github.com/quic-go/quic-go/http3"

	"xkit.dev/bench/go/internal/routes"
)

func main() {
	addr := routes.ListenAddress("CERT", "KEY")
	cert, err := tls.LoadX509KeyPair(os.Args[2], os.Args[3])
	if err != nil {
		log.Fatalf("loading certificate: %v", err)
	}
	server := &http3.Server{
		Addr:      addr,
		Handler:   routes.NewHandler(),
		TLSConfig: http3.ConfigureTLSConfig(&tls.Config{Certificates: []tls.Certificate{cert}}),
	}
	log.Fatal(server.ListenAndServe())
}
