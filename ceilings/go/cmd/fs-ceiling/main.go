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

func main() {
	root := flag.String("root", "", "dataset folder")
	split := flag.String("split", "train", "split")
	kind := flag.String("layout", "imagefolder", "imagefolder (manifest.txt) or shards (index.json)")
	concurrency := flag.Int("concurrency", 4, "reads in flight")
	flag.Parse()

	dir := filepath.Join(*root, *split)
	result := ceiling.Result{Program: "go/os " + *kind, Concurrency: *concurrency}
	var count ceiling.Counter
	clock := ceiling.Start()
	switch *kind {
	case "imagefolder":
		data, err := os.ReadFile(filepath.Join(dir, "manifest.txt"))
		if err != nil {
			ceiling.Fail("fs-ceiling: %v (ingest the dataset with --backend fs first)", err)
		}
		keys, err := layout.ManifestKeys(data)
		if err != nil {
			ceiling.Fail("fs-ceiling: %s: %v", filepath.Join(dir, "manifest.txt"), err)
		}
		err = ceiling.Each(keys, *concurrency, func(key string) error {
			data, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(key)))
			count.Samples.Add(1)
			count.Bytes.Add(int64(len(data)))
			count.Wire.Add(int64(len(data)))
			return err
		})
		if err != nil {
			ceiling.Fail("fs-ceiling: %v", err)
		}
	case "shards":
		data, err := os.ReadFile(filepath.Join(dir, "index.json"))
		if err != nil {
			ceiling.Fail("fs-ceiling: %v (ingest the dataset with --backend fs -o layout=shards first)", err)
		}
		shards, err := layout.IndexShards(data)
		if err != nil {
			ceiling.Fail("fs-ceiling: %s: %v", filepath.Join(dir, "index.json"), err)
		}
		err = ceiling.Each(shards, *concurrency, func(s layout.Shard) error {
			f, err := os.Open(filepath.Join(dir, s.Name))
			if err != nil {
				return err
			}
			defer f.Close()
			samples, payload, wire, err := layout.CountTar(f, make([]byte, 256*1024))
			count.Samples.Add(samples)
			count.Bytes.Add(payload)
			count.Wire.Add(wire)
			if err != nil {
				return err
			}
			return nil
		})
		if err != nil {
			ceiling.Fail("fs-ceiling: %v", err)
		}
	default:
		ceiling.Fail("fs-ceiling: unknown -layout %q: use imagefolder or shards", *kind)
	}
	result.Seconds, result.CPUSeconds = clock.Seconds(), clock.CPU()
	result.Samples, result.Bytes, result.WireBytes = count.Samples.Load(), count.Bytes.Load(), count.Wire.Load()
	ceiling.Print(result)
}
