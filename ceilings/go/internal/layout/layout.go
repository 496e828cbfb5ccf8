// Package layout reads the workbench's on-storage formats from their documented shape (manifest lines,
// the shard index document, WebDataset tars), independently of the Python code that writes them.
package layout

import (
	"archive/tar"
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/url"
	"path"
	"strings"
)

// ManifestKeys returns the keys of a manifest ("key[ label]" lines, keys percent-encoded), relative to the split.
func ManifestKeys(data []byte) ([]string, error) {
	var keys []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64*1024), 16*1024*1024)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		raw, _, _ := strings.Cut(line, " ")
		key, err := url.PathUnescape(raw)
		if err != nil {
			return nil, fmt.Errorf("bad manifest key %q: %v", raw, err)
		}
		keys = append(keys, key)
	}
	return keys, sc.Err()
}

// Shard is one entry of index.json.
type Shard struct {
	Name    string `json:"name"`
	Samples int64  `json:"samples"`
	Bytes   int64  `json:"bytes"`
}

// IndexShards parses a "workbench-shards" index document.
func IndexShards(data []byte) ([]Shard, error) {
	var doc struct {
		Format string  `json:"format"`
		Shards []Shard `json:"shards"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("invalid shard index: %v", err)
	}
	if doc.Format != "workbench-shards" {
		return nil, fmt.Errorf("invalid shard index: format %q, not workbench-shards", doc.Format)
	}
	return doc.Shards, nil
}

// Digester takes the digests of the samples a pass reads (*ceiling.Counter is one): Hasher is nil when it
// takes none (every timed pass), else a fresh hash for one sample's image, which Sum then records by id.
type Digester interface {
	Hasher() hash.Hash
	Sum(key string, h hash.Hash)
}

// IDEntry is the tar member that holds a sample's id (the uuid the backend's scan reports), after its image.
const IDEntry = "uid"

// CountTar reads a WebDataset tar to the end: samples = distinct keys, payload = bytes of each sample's
// first member (the image: writers put it first), wire = every byte read from r. When d takes digests, each
// sample's image is hashed as it streams and recorded under the sample's id (its "uid" member; its tar key
// when it has none).
func CountTar(r io.Reader, buf []byte, d Digester) (samples, payload, wire int64, err error) {
	counted := &countingReader{r: r}
	tr := tar.NewReader(counted)
	last, id := "", ""
	var h hash.Hash
	flush := func() {
		if h != nil {
			d.Sum(id, h)
		}
	}
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return 0, 0, 0, err
		}
		if hdr.Typeflag != tar.TypeReg {
			continue
		}
		dir, base := path.Split(hdr.Name)
		stem, ext, _ := strings.Cut(base, ".")
		key := dir + stem
		first := key != last
		if first {
			flush()
			h, id = d.Hasher(), key
		}
		var sink io.Writer = discard{}
		switch {
		case first && h != nil:
			sink = h
		case !first && h != nil && ext == IDEntry:
			var raw bytes.Buffer
			if _, err := io.Copy(&raw, io.LimitReader(tr, 256)); err != nil {
				return 0, 0, 0, err
			}
			id = strings.TrimSpace(raw.String())
		}
		n, err := io.CopyBuffer(sink, tr, buf)
		if err != nil {
			return 0, 0, 0, err
		}
		if first {
			samples++
			payload += n
			last = key
		}
	}
	flush()
	_, _ = io.CopyBuffer(discard{}, counted, buf) // the tar's end padding
	return samples, payload, counted.n, nil
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// discard is io.Discard without ReaderFrom, so CopyBuffer really moves the bytes through buf.
type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
