// Command portprobe is the network probe of the Docker tests: a static
// binary a test uploads into a server's directory, as a customer would,
// and runs from the server's console; or runs on the host inside a network
// namespace (ip netns exec). It prints one line per event.
//
//	portprobe listen NAME ADDR...  listen on each TCP address; print
//	                              "LISTEN ADDR", then for every connection
//	                              "ACCEPT NAME LOCAL REMOTE" and answer it
//	                              with "portprobe NAME LOCAL" and a newline
//	portprobe dial TAG ADDR...     connect to each address (3 s at most) and
//	                              read one line: "DIAL TAG ADDR OK <line>"
//	                              or "DIAL TAG ADDR ERR <error>"
package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"time"
)

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: portprobe listen NAME ADDR... | portprobe dial TAG ADDR...")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "listen":
		if len(os.Args) < 4 {
			os.Exit(2)
		}
		listen(os.Args[2], os.Args[3:])
	case "dial":
		if len(os.Args) < 4 {
			os.Exit(2)
		}
		for _, a := range os.Args[3:] {
			fmt.Println("DIAL " + os.Args[2] + " " + dial(a))
		}
	default:
		os.Exit(2)
	}
}

var out sync.Mutex

func say(format string, args ...any) {
	out.Lock()
	defer out.Unlock()
	fmt.Printf(format+"\n", args...)
}

func listen(name string, addrs []string) {
	var wg sync.WaitGroup
	for _, a := range addrs {
		ln, err := net.Listen("tcp", a)
		if err != nil {
			say("LISTENFAIL %s %v", a, err)
			os.Exit(1)
		}
		say("LISTEN %s", a)
		wg.Go(func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				say("ACCEPT %s %s %s", name, c.LocalAddr(), c.RemoteAddr())
				fmt.Fprintf(c, "portprobe %s %s\n", name, c.LocalAddr())
				c.Close()
			}
		})
	}
	wg.Wait()
}

func dial(addr string) string {
	c, err := net.DialTimeout("tcp", addr, 3*time.Second)
	if err != nil {
		return fmt.Sprintf("%s ERR %v", addr, err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil && line == "" {
		return fmt.Sprintf("%s ERR read: %v", addr, err)
	}
	return fmt.Sprintf("%s OK %s", addr, strings.TrimSpace(line))
}
