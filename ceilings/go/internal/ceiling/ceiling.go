// Package ceiling holds what every ceiling program shares: the result line, CPU accounting, the
// worker pool and the one-line failure. It knows nothing of any storage system.
package ceiling

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"hash"
	"os"
	"sort"
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
	Bytes          int64   `json:"bytes"`        // payload bytes (the encoded images), as the backend's scan() counts
	WireBytes      int64   `json:"wire_bytes"`   // bytes of whole objects/rows/files read (shards: tar headers too)
	Seconds        float64 `json:"seconds"`      // the timed pass's reads (and the listing with -warmup 0)
	ListSeconds    float64 `json:"list_seconds"` // listing the split, once
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

// Counter totals what the workers read; with Digests set (the -digest pass) it also takes each sample's digest.
type Counter struct {
	Samples, Bytes, Wire atomic.Int64
	Digests              *Digests
}

// Digests holds one line per sample a pass read: "sha256 <hex> <key as a JSON string>".
type Digests struct {
	mu    sync.Mutex
	lines []string
}

// Hasher is a fresh SHA-256 for one sample's bytes, or nil when this pass takes no digests.
func (c *Counter) Hasher() hash.Hash {
	if c.Digests == nil {
		return nil
	}
	return sha256.New()
}

// Sum records the digest h (from Hasher) of the sample `key`; nothing when h is nil.
func (c *Counter) Sum(key string, h hash.Hash) {
	if h == nil || c.Digests == nil {
		return
	}
	quoted, _ := json.Marshal(key)
	line := "sha256 " + hex.EncodeToString(h.Sum(nil)) + " " + string(quoted)
	c.Digests.mu.Lock()
	c.Digests.lines = append(c.Digests.lines, line)
	c.Digests.mu.Unlock()
}

// Digest records the digest of one sample read whole into data; nothing when this pass takes no digests.
func (c *Counter) Digest(key string, data []byte) {
	if h := c.Hasher(); h != nil {
		h.Write(data)
		c.Sum(key, h)
	}
}

// Print writes the lines to stdout, sorted (the workers' order is not the dataset's).
func (d *Digests) Print() {
	sort.Strings(d.lines)
	out := bufio.NewWriter(os.Stdout)
	for _, line := range d.lines {
		fmt.Fprintln(out, line)
	}
	_ = out.Flush()
}

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

// Listing reads a layout's listing (manifest.txt, index.json) with read and parses it into the jobs; either
// failure ends the program with one line: what failed at where, and the hint (what to do) after a read failure.
func Listing[T any](program, where, hint string, read func() ([]byte, error), parse func([]byte) ([]T, error)) []T {
	data, err := read()
	if err != nil {
		Fail("%s: reading %s failed: %v (%s)", program, where, err, hint)
	}
	jobs, err := parse(data)
	if err != nil {
		Fail("%s: %s: %v", program, where, err)
	}
	return jobs
}

// Run is Each that ends the program with one line on the first error.
func Run[T any](program, where string, jobs []T, n int, fn func(T) error) {
	if err := Each(jobs, n, fn); err != nil {
		Fail("%s: reading %s failed: %v", program, where, err)
	}
}

// WarmupFlag is the -warmup flag: untimed passes over the split before the timed one.
func WarmupFlag() *int {
	return flag.Int("warmup", 0, "untimed passes over the split before the timed one (what a loader kept from epoch to epoch has had)")
}

// DigestFlag is the -digest flag: one more, untimed, pass that prints every sample's digest (see Timed).
func DigestFlag() *bool {
	return flag.Bool("digest", false, "after the timed pass, one untimed pass that prints \"sha256 <hex> <key>\" "+
		"per sample read (checks what was read; the figures stay the timed pass's)")
}

// Timed lists the split once (list returns the pass over what it listed), runs that pass warmup times untimed,
// then once timed, and prints r with the timed pass's figures: a warm pass leaves open connections, the
// server's caches and (Java) compiled code, as a loader's earlier epochs do. A loader lists a split in its
// first epoch and keeps the list, so the listing is timed only with warmup 0 (the first epoch); its own time
// is in list_seconds. With digest, one more pass after the timed one (so untimed, and the timed pass does no
// hashing) prints a digest line per sample it read, before the result line.
func Timed(r Result, warmup int, digest bool, list func() func(count *Counter)) {
	clock := Start()
	pass := list()
	r.ListSeconds = clock.Seconds()
	for i := 0; i < warmup; i++ {
		pass(&Counter{})
	}
	if warmup > 0 {
		clock = Start()
	}
	var count Counter
	pass(&count)
	r = Measured(r, clock, &count)
	if digest {
		digests := &Digests{}
		pass(&Counter{Digests: digests})
		digests.Print()
	}
	Print(r)
}

// Measured fills the measured phase (started at clock) and the totals into r.
func Measured(r Result, clock Clock, count *Counter) Result {
	r.Seconds, r.CPUSeconds = clock.Seconds(), clock.CPU()
	r.Samples, r.Bytes, r.WireBytes = count.Samples.Load(), count.Bytes.Load(), count.Wire.Load()
	return r
}

// Add counts one read of samples that carried payload bytes of images in wire bytes.
func (c *Counter) Add(samples, payload, wire int64) {
	c.Samples.Add(samples)
	c.Bytes.Add(payload)
	c.Wire.Add(wire)
}

// Remote holds the flags every ceiling that talks to a server takes.
type Remote struct {
	CA          *string
	TLS         *bool
	Concurrency *int
	timeout     *float64
}

// RemoteFlags registers -ca, -tls, -concurrency (requests names what is in flight) and -timeout.
func RemoteFlags(requests string) Remote {
	return Remote{
		CA:          flag.String("ca", "", "with -tls: CA bundle (PEM) that signed the server's certificate"),
		TLS:         flag.Bool("tls", false, "TLS, verified against -ca"),
		Concurrency: flag.Int("concurrency", 16, requests+" in flight"),
		timeout:     flag.Float64("timeout", 10, "seconds per request and per connect"),
	}
}

// PerRequest is -timeout as a duration.
func (r Remote) PerRequest() time.Duration { return time.Duration(*r.timeout * float64(time.Second)) }
