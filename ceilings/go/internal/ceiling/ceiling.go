// Package ceiling holds what every ceiling program shares: the result line, CPU accounting, the
// worker pool and the one-line failure. It knows nothing of any storage system.
package ceiling

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Result is the one JSON line a ceiling program prints on success.
type Result struct {
	Program        string  `json:"program"`
	Samples        int64   `json:"samples"`
	Bytes          int64   `json:"bytes"`      // payload bytes (the encoded images), as the backend's scan() counts
	WireBytes      int64   `json:"wire_bytes"` // bytes of whole objects/rows/files read (shards: tar headers too)
	Seconds        float64 `json:"seconds"`    // listing + reads, after connecting
	ConnectSeconds float64 `json:"connect_seconds"`
	CPUSeconds     float64 `json:"cpu_s"` // user+sys of this process during `seconds`
	CPUTotal       float64 `json:"cpu_total_s"`
	Concurrency    int     `json:"concurrency"`
}

// CPU is the process's user+sys time in seconds (all threads).
func CPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Sec+ru.Stime.Sec) + float64(ru.Utime.Usec+ru.Stime.Usec)/1e6
}

// Clock measures one phase: wall time and CPU time.
type Clock struct {
	start time.Time
	cpu   float64
}

func Start() Clock { return Clock{time.Now(), CPU()} }

func (c Clock) Seconds() float64 { return time.Since(c.start).Seconds() }
func (c Clock) CPU() float64     { return CPU() - c.cpu }

// Print writes the result line to stdout.
func Print(r Result) {
	r.CPUTotal = CPU()
	line, _ := json.Marshal(r)
	fmt.Println(string(line))
}

// Fail prints one line to stderr and exits 1; the message never holds a credential (none is ever formatted in).
func Fail(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	msg = strings.Join(strings.Fields(msg), " ")
	fmt.Fprintln(os.Stderr, msg)
	os.Exit(1)
}

// Secret reads a credential from the environment (never from argv); empty when unset.
func Secret(name string) string { return os.Getenv(name) }

// Counter totals what the workers read.
type Counter struct{ Samples, Bytes, Wire atomic.Int64 }

// Each runs fn over jobs with n goroutines in flight; the first error stops handing out new jobs.
func Each[T any](jobs []T, n int, fn func(T) error) error {
	if n < 1 {
		n = 1
	}
	var (
		next  atomic.Int64
		once  sync.Once
		first error
		stop  atomic.Bool
		wg    sync.WaitGroup
	)
	for w := 0; w < n; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				i := int(next.Add(1) - 1)
				if i >= len(jobs) {
					return
				}
				if err := fn(jobs[i]); err != nil {
					once.Do(func() { first = err; stop.Store(true) })
					return
				}
			}
		}()
	}
	wg.Wait()
	return first
}
