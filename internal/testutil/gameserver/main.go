// Command gameserver is a fake game server used by the Docker tests. It runs
// as the entrypoint of the wharf-test/gameserver image (built by
// internal/testutil/testimages) and behaves like a console-driven server:
//
//   - it prints a few boot lines, then `Done (1.0s)! For help, type "help"`;
//   - it reads commands from stdin, one per line:
//     echo X       prints X
//     stop         prints "Stopping server" and exits 0
//     crash        exits 1
//     flood N      prints N numbered lines as fast as it can
//     floodts S    prints "ts <unix ns> <n>" lines for S seconds, then "floodts done <unix ns>"
//     longline N   prints N bytes of 'x', then a newline
//     env          prints its environment, one variable per line
//     sleep S      sleeps S seconds (a decimal number)
//     alloc MB     allocates and touches MB mebibytes (to provoke the OOM killer)
//     help         lists the commands
//     anything else prints "Unknown command: X";
//   - SIGTERM and SIGINT print "Signal received: SIGTERM" (or SIGINT) and exit 0;
//   - EOF on stdin is ignored: the server keeps running until stopped.
//
// The boot delay before the done line is -delay or $GAMESERVER_STARTUP_DELAY
// (a Go duration, default 0).
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	delayFlag := flag.String("delay", os.Getenv("GAMESERVER_STARTUP_DELAY"), "delay before the done line (Go duration)")
	flag.Parse()
	var delay time.Duration
	if *delayFlag != "" {
		d, err := time.ParseDuration(*delayFlag)
		if err != nil {
			fmt.Fprintf(os.Stderr, "bad delay %q: %v\n", *delayFlag, err)
			os.Exit(2)
		}
		delay = d
	}

	out := bufio.NewWriterSize(os.Stdout, 64<<10)
	say := func(s string) {
		out.WriteString(s)
		out.WriteByte('\n')
		out.Flush()
	}

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		s := <-sigs
		name := "SIGTERM"
		if s == syscall.SIGINT {
			name = "SIGINT"
		}
		// Write directly: the main goroutine may be in the middle of a flush.
		fmt.Fprintf(os.Stdout, "\nSignal received: %s\n", name)
		os.Exit(0)
	}()

	say("Starting fake game server")
	say("Loading properties")
	say(fmt.Sprintf("Preparing level \"world\" (pid %d)", os.Getpid()))
	time.Sleep(delay)
	say(`Done (1.0s)! For help, type "help"`)

	in := bufio.NewReaderSize(os.Stdin, 64<<10)
	for {
		line, err := in.ReadString('\n')
		if line != "" {
			handle(strings.TrimRight(line, "\r\n"), out, say)
		}
		if err == io.EOF {
			select {} // stdin closed: keep running until a signal or kill
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "stdin: %v\n", err)
			select {}
		}
	}
}

func handle(line string, out *bufio.Writer, say func(string)) {
	cmd, arg, _ := strings.Cut(strings.TrimSpace(line), " ")
	arg = strings.TrimSpace(arg)
	switch cmd {
	case "":
	case "help":
		say("Commands: echo X, stop, crash, flood N, floodts S, longline N, env, sleep S, alloc MB, help")
	case "echo":
		say(arg)
	case "stop":
		say("Stopping server")
		os.Exit(0)
	case "crash":
		say("Crashing")
		os.Exit(1)
	case "flood":
		n, _ := strconv.Atoi(arg)
		for i := 1; i <= n; i++ {
			out.WriteString("flood line ")
			out.WriteString(strconv.Itoa(i))
			out.WriteByte('\n')
		}
		out.Flush()
	case "floodts":
		floodTimestamps(arg, out)
	case "longline":
		n, _ := strconv.Atoi(arg)
		chunk := []byte(strings.Repeat("x", 32<<10))
		for n > 0 {
			k := min(n, len(chunk))
			out.Write(chunk[:k])
			n -= k
		}
		out.WriteByte('\n')
		out.Flush()
	case "env":
		env := os.Environ()
		sort.Strings(env)
		for _, e := range env {
			out.WriteString(e)
			out.WriteByte('\n')
		}
		out.Flush()
	case "sleep":
		s, _ := strconv.ParseFloat(arg, 64)
		time.Sleep(time.Duration(s * float64(time.Second)))
		say("Slept")
	case "alloc":
		mb, _ := strconv.Atoi(arg)
		var keep [][]byte
		for i := 0; i < mb; i++ {
			b := make([]byte, 1<<20)
			for j := range b {
				b[j] = byte(j)
			}
			keep = append(keep, b)
		}
		say(fmt.Sprintf("Allocated %d MiB", len(keep)))
	default:
		say("Unknown command: " + cmd)
	}
}

// floodTimestamps prints timestamped numbered lines for secs seconds, in
// writes of 64 lines, then the done line with its own timestamp.
func floodTimestamps(secs string, out *bufio.Writer) {
	f, _ := strconv.ParseFloat(secs, 64)
	end := time.Now().Add(time.Duration(f * float64(time.Second)))
	var buf []byte
	n := 0
	for time.Now().Before(end) {
		for range 64 {
			n++
			buf = append(buf[:0], "ts "...)
			buf = strconv.AppendInt(buf, time.Now().UnixNano(), 10)
			buf = append(buf, ' ')
			buf = strconv.AppendInt(buf, int64(n), 10)
			buf = append(buf, '\n')
			out.Write(buf)
		}
		out.Flush()
	}
	out.WriteString("floodts done " + strconv.FormatInt(time.Now().UnixNano(), 10) + "\n")
	out.Flush()
}
