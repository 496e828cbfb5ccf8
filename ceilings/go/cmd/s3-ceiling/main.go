// s3-ceiling: what a compiled S3 client (minio-go) reads from one split of a workbench dataset with
// N GETs in flight, either one object per sample (manifest.txt) or WebDataset shards (index.json).
// Credentials come from CEILING_ACCESS_KEY / CEILING_SECRET_KEY; it prints one JSON line. Several endpoints
// (the nodes of a distributed MinIO, each serving any object) share the GETs in turn.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"hash"
	"io"
	"net"
	"net/http"
	"os"
	"runtime/pprof"
	"strings"
	"sync/atomic"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/workbench/ceilings/internal/ceiling"
	"github.com/workbench/ceilings/internal/layout"
)

type reader struct {
	clients  []*minio.Core // one per endpoint; the plain request path: the body as the response streams it
	next     atomic.Uint64 // the endpoint of the next GET (round robin)
	bucket   string
	prefix   string
	timeout  time.Duration
	endpoint string // every endpoint, as errors name them
}

func (r *reader) key(rel string) string {
	if r.prefix == "" {
		return rel
	}
	return r.prefix + "/" + rel
}

// get streams one object into fn, bounded by the request timeout.
func (r *reader) get(rel string, fn func(io.Reader) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
	defer cancel()
	client := r.clients[(r.next.Add(1)-1)%uint64(len(r.clients))]
	body, _, _, err := client.GetObject(ctx, r.bucket, r.key(rel), minio.GetObjectOptions{})
	if err != nil {
		return describe(err, r.bucket, r.key(rel))
	}
	defer body.Close()
	if err := fn(body); err != nil {
		return describe(err, r.bucket, r.key(rel))
	}
	return nil
}

func (r *reader) getAll(rel string) ([]byte, error) {
	var data []byte
	err := r.get(rel, func(body io.Reader) (err error) { data, err = io.ReadAll(body); return })
	return data, err
}

// url names one object as s3://bucket/key.
func (r *reader) url(rel string) string { return "s3://" + r.bucket + "/" + r.key(rel) }

func describe(err error, bucket, key string) error {
	resp := minio.ToErrorResponse(err)
	if resp.Code != "" {
		return fmt.Errorf("s3://%s/%s: %s (%s)", bucket, key, resp.Code, resp.Message)
	}
	return fmt.Errorf("s3://%s/%s: %v", bucket, key, err)
}

const program = "s3-ceiling"

func main() {
	endpoint := flag.String("endpoint", "127.0.0.1:9000", "host:port of the S3 server; several comma-separated")
	region := flag.String("region", "us-east-1", "region")
	bucket := flag.String("bucket", "", "bucket")
	prefix := flag.String("prefix", "", "dataset prefix")
	split := flag.String("split", "train", "split")
	kind := flag.String("layout", "objects", "objects (manifest.txt) or shards (index.json)")
	remote := ceiling.RemoteFlags("GETs")
	warmup := ceiling.WarmupFlag()
	digest := ceiling.DigestFlag()
	profile := flag.String("cpuprofile", "", "write a Go CPU profile here (to see where a ceiling's CPU goes)")
	flag.Parse()
	if *profile != "" {
		f, err := os.Create(*profile)
		if err != nil {
			ceiling.Fail("s3-ceiling: %v", err)
		}
		_ = pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}

	access, secret := ceiling.Secret("CEILING_ACCESS_KEY"), ceiling.Secret("CEILING_SECRET_KEY")
	if access == "" || secret == "" {
		ceiling.Fail("s3-ceiling: CEILING_ACCESS_KEY and CEILING_SECRET_KEY must be set in the environment")
	}
	perRequest := remote.PerRequest()
	concurrency, useTLS, caFile := remote.Concurrency, remote.TLS, remote.CA
	transport := &http.Transport{
		DialContext:           (&net.Dialer{Timeout: perRequest}).DialContext,
		MaxIdleConns:          *concurrency + 4,
		MaxIdleConnsPerHost:   *concurrency + 4,
		ResponseHeaderTimeout: perRequest,
		TLSHandshakeTimeout:   perRequest,
		DisableCompression:    true,
		ReadBufferSize:        256 * 1024, // fewer read syscalls per ~110 KB body
	}
	if *useTLS {
		pool := x509.NewCertPool()
		if *caFile != "" {
			pem, err := os.ReadFile(*caFile)
			if err != nil || !pool.AppendCertsFromPEM(pem) {
				ceiling.Fail("s3-ceiling: cannot read a PEM CA from %s: %v", *caFile, err)
			}
		}
		transport.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	minio.MaxRetry = 1 // a ceiling measures, it does not retry
	r := &reader{bucket: *bucket, prefix: strings.Trim(*prefix, "/"), timeout: perRequest, endpoint: *endpoint}
	for _, address := range strings.Split(*endpoint, ",") {
		client, err := minio.NewCore(address, &minio.Options{
			Creds: credentials.NewStaticV4(access, secret, ""), Secure: *useTLS, Region: *region,
			Transport: transport, BucketLookup: minio.BucketLookupPath,
		})
		if err != nil {
			ceiling.Fail("s3-ceiling: bad endpoint %s: %v", address, err)
		}
		r.clients = append(r.clients, client)
	}
	result := ceiling.Result{Program: "go/minio-go " + *kind, Concurrency: *concurrency}
	ceiling.Timed(result, *warmup, *digest, func() func(*ceiling.Counter) { return r.list(*split, *kind, *concurrency) })
}

// list reads the split's listing and returns a pass that reads the split once: every object or every shard, n
// GETs in flight.
func (r *reader) list(split, kind string, inFlight int) func(count *ceiling.Counter) {
	switch kind {
	case "objects":
		manifest := split + "/manifest.txt"
		keys := ceiling.Listing(program, r.url(manifest), "is the dataset ingested into s3-objects?",
			func() ([]byte, error) { return r.getAll(manifest) }, layout.ManifestKeys)
		bufs := make(chan []byte, inFlight)
		for i := 0; i < inFlight; i++ {
			bufs <- make([]byte, 256*1024)
		}
		return func(count *ceiling.Counter) {
			ceiling.Run(program, r.endpoint, keys, inFlight, func(key string) error {
				buf := <-bufs
				defer func() { bufs <- buf }()
				return r.get(split+"/"+key, func(body io.Reader) error {
					h := count.Hasher()
					n, err := readAll(body, buf, h)
					count.Add(1, n, n)
					if err == nil {
						count.Sum(key, h)
					}
					return err
				})
			})
		}
	case "shards":
		index := split + "/index.json"
		shards := ceiling.Listing(program, r.url(index), "is the dataset ingested into s3-shards?",
			func() ([]byte, error) { return r.getAll(index) }, layout.IndexShards)
		return func(count *ceiling.Counter) {
			ceiling.Run(program, r.endpoint, shards, inFlight, func(s layout.Shard) error {
				buf := make([]byte, 256*1024)
				return r.get(split+"/"+s.Name, func(body io.Reader) error {
					samples, payload, wire, err := layout.CountTar(body, buf, count)
					count.Add(samples, payload, wire)
					return err
				})
			})
		}
	}
	ceiling.Fail("%s: unknown -layout %q: use objects or shards", program, kind)
	return nil
}

// readAll reads body to its end through buf (the bytes land in user memory, as a loader's would), into h too
// when h is not nil (the -digest pass).
func readAll(body io.Reader, buf []byte, h hash.Hash) (int64, error) {
	var n int64
	for {
		m, err := body.Read(buf)
		n += int64(m)
		if h != nil {
			h.Write(buf[:m])
		}
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}
