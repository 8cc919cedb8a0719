// Command https_bench_server serves HTTP/2 (and HTTP/1.1 for clients that do not
// offer h2 in ALPN) over crypto/tls.
// Usage: https_bench_server PORT CERT KEY. GOMAXPROCS in the environment sets its cores;
// BENCH_TLS_NO_RESUMPTION=1 turns session tickets off, so that every new
// connection costs a full handshake (to compare with xKit's --no-tickets
// --session-cache 0).
package main

import (
	"crypto/tls"
	"log"
	"net/http"
	"os"

	"xkit.dev/bench/go/internal/routes"
)

func main() {
	addr := routes.ListenAddress("CERT", "KEY")
	cert, err := tls.LoadX509KeyPair(os.Args[2], os.Args[3])
	if err != nil {
		log.Fatalf("loading certificate: %v", err)
	}
	server := &http.Server{
		Addr:        addr,
		Handler:     routes.NewHandler(),
		IdleTimeout: routes.IdleTimeout,
		TLSConfig: &tls.Config{
			Certificates: []tls.Certificate{cert},
			NextProtos:   []string{"h2", "http/1.1"},
			// crypto/tls resumes TLS 1.3 only through tickets.
			SessionTicketsDisabled: os.Getenv("BENCH_TLS_NO_RESUMPTION") != "",
		},
	}
	log.Fatal(server.ListenAndServeTLS("", ""))
}
