// Command kdist-initwait waits until a DNS name resolves: the job of the
// Kubeflow training operator's worker init container (upstream: a shell loop
// around busybox nslookup, whose exit status is wrong for short names when a
// search domain answers NXDOMAIN). It uses Go's own resolver, which honours
// /etc/resolv.conf's search list and ndots like the training process will.
//
// Usage: kdist-initwait NAME TRIES   (one try every 2 seconds)
package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: kdist-initwait NAME TRIES")
		os.Exit(2)
	}
	name := os.Args[1]
	tries, err := strconv.Atoi(os.Args[2])
	if err != nil || tries < 1 {
		fmt.Fprintf(os.Stderr, "kdist-initwait: bad TRIES %q\n", os.Args[2])
		os.Exit(2)
	}
	for i := 1; i <= tries; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		addrs, err := net.DefaultResolver.LookupHost(ctx, name)
		cancel()
		if err == nil && len(addrs) > 0 {
			fmt.Printf("%s resolves to %v\n", name, addrs)
			return
		}
		fmt.Printf("waiting for master %s (try %d/%d): %v\n", name, i, tries, err)
		if i < tries {
			time.Sleep(2 * time.Second)
		}
	}
	os.Exit(1)
}
