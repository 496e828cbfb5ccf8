// fs-ceiling: what plain compiled file reads give for one split of a workbench dataset on the local
// disk, N goroutines in flight: an ImageFolder copy (manifest.txt) or WebDataset shards (index.json).
package main

import (
	"flag"
	"os"
	"path/filepath"

	"github.com/workbench/ceilings/internal/ceiling"
	"github.com/workbench/ceilings/internal/layout"
)

const program = "fs-ceiling"

func main() {
	root := flag.String("root", "", "dataset folder")
	split := flag.String("split", "train", "split")
	kind := flag.String("layout", "imagefolder", "imagefolder (manifest.txt) or shards (index.json)")
	concurrency := flag.Int("concurrency", 4, "reads in flight")
	warmup := ceiling.WarmupFlag()
	digest := ceiling.DigestFlag()
	flag.Parse()

	dir := filepath.Join(*root, *split)
	result := ceiling.Result{Program: "go/os " + *kind, Concurrency: *concurrency}
	ceiling.Timed(result, *warmup, *digest, func() func(*ceiling.Counter) { return list(dir, *kind, *concurrency) })
}

// list lists the split and returns a pass that reads it once: every file (imagefolder) or every shard, n reads
// in flight.
func list(dir, kind string, n int) func(count *ceiling.Counter) {
	switch kind {
	case "imagefolder":
		manifest := filepath.Join(dir, "manifest.txt")
		keys := ceiling.Listing(program, manifest, "ingest the dataset with --backend fs first",
			func() ([]byte, error) { return os.ReadFile(manifest) }, layout.ManifestKeys)
		return func(count *ceiling.Counter) {
			ceiling.Run(program, dir, keys, n, func(key string) error {
				data, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(key)))
				count.Add(1, int64(len(data)), int64(len(data)))
				if err == nil {
					count.Digest(key, data)
				}
				return err
			})
		}
	case "shards":
		index := filepath.Join(dir, "index.json")
		shards := ceiling.Listing(program, index, "ingest the dataset with --backend fs -o layout=shards first",
			func() ([]byte, error) { return os.ReadFile(index) }, layout.IndexShards)
		return func(count *ceiling.Counter) {
			ceiling.Run(program, dir, shards, n, func(s layout.Shard) error {
				f, err := os.Open(filepath.Join(dir, s.Name))
				if err != nil {
					return err
				}
				defer f.Close()
				samples, payload, wire, err := layout.CountTar(f, make([]byte, 256*1024), count)
				count.Add(samples, payload, wire)
				return err
			})
		}
	}
	ceiling.Fail("%s: unknown -layout %q: use imagefolder or shards", program, kind)
	return nil
}
