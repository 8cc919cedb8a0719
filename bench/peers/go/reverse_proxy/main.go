// reverse_proxy is the Go peer of `xkbench compare proxy`: net/http/httputil's ReverseProxy in
// front of one HTTP/1.1 upstream, as a Go service would pass requests on. With CERT and KEY it
// serves TLS, and then HTTP/2 by ALPN (net/http's own). Its transport keeps as many idle upstream
// connections as the benchmark has clients in flight (net/http keeps 2 per host by default, which
// would make it connect anew for most requests). It honours GOMAXPROCS.
//
//	reverse_proxy PORT UPSTREAM_URL [CERT KEY]
package main

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
)

const idleUpstreamConnections = 1024

func main() {
	if len(os.Args) != 3 && len(os.Args) != 5 {
		fmt.Fprintln(os.Stderr, "usage: reverse_proxy PORT UPSTREAM_URL [CERT KEY]")
		os.Exit(2)
	}
	upstream, err := url.Parse(os.Args[2])
	if err != nil {
		log.Fatalf("upstream %q: %v", os.Args[2], err)
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.MaxIdleConns = idleUpstreamConnections
	transport.MaxIdleConnsPerHost = idleUpstreamConnections
	proxy := httputil.NewSingleHostReverseProxy(upstream)
	proxy.Transport = transport
	server := &http.Server{Addr: "127.0.0.1:" + os.Args[1], Handler: proxy}
	fmt.Printf("listening on 127.0.0.1:%s\n", os.Args[1])
	if len(os.Args) == 5 {
		err = server.ListenAndServeTLS(os.Args[3], os.Args[4])
	} else {
		err = server.ListenAndServe()
	}
	log.Fatal(err)
}
