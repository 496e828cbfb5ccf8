// cassandra-ceiling: what a compiled Cassandra driver (gocql) reads from one split of a workbench
// dataset: the ids from metadata_<split>, then one prepared single-partition SELECT of data_<split>
// per id, N in flight. Login from CEILING_USERNAME / CEILING_PASSWORD; it prints one JSON line.
package main

import (
	"flag"
	"io"
	"log"
	"strconv"
	"strings"
	"time"

	"github.com/gocql/gocql"

	"github.com/workbench/ceilings/internal/ceiling"
)

func quote(name string) string { return `"` + strings.ReplaceAll(name, `"`, `""`) + `"` }

// table quotes "ks.table" as "ks"."table".
func table(name string) string {
	ks, t, ok := strings.Cut(name, ".")
	if !ok {
		ceiling.Fail("cassandra-ceiling: table %q is not keyspace.table", name)
	}
	return quote(ks) + "." + quote(t)
}

func main() {
	host := flag.String("host", "127.0.0.1", "contact points, comma-separated (a ring: every node, each at -port)")
	port := flag.Int("port", 9042, "CQL port")
	dataTable := flag.String("data-table", "", "keyspace.data_<split>")
	metaTable := flag.String("metadata-table", "", "keyspace.metadata_<split>")
	idCol := flag.String("id-col", "id", "uuid key column")
	dataCol := flag.String("data-col", "data", "blob column")
	remote := ceiling.RemoteFlags("SELECTs")
	conns := flag.Int("conns", 2, "connections to each node")
	warmup := ceiling.WarmupFlag()
	digest := ceiling.DigestFlag()
	flag.Parse()

	gocql.Logger = log.New(io.Discard, "", 0)
	where := *host + ":" + strconv.Itoa(*port)
	perRequest := remote.PerRequest()
	cluster := gocql.NewCluster(strings.Split(*host, ",")...)
	cluster.Port = *port
	cluster.Timeout = perRequest
	cluster.ConnectTimeout = perRequest
	cluster.WriteTimeout = perRequest
	cluster.NumConns = *conns
	cluster.Consistency = gocql.One
	cluster.ProtoVersion = 4
	cluster.DisableInitialHostLookup = true // exactly the listed nodes: behind toxiproxy their advertised addresses are not ours
	cluster.RetryPolicy = &gocql.SimpleRetryPolicy{NumRetries: 0}
	cluster.ReconnectionPolicy = &gocql.ConstantReconnectionPolicy{MaxRetries: 1, Interval: time.Second}
	if user := ceiling.Secret("CEILING_USERNAME"); user != "" {
		cluster.Authenticator = gocql.PasswordAuthenticator{Username: user, Password: ceiling.Secret("CEILING_PASSWORD")}
	}
	if *remote.TLS {
		cluster.SslOpts = &gocql.SslOptions{CaPath: *remote.CA, EnableHostVerification: true}
	}
	connect := ceiling.Start()
	session, err := cluster.CreateSession()
	if err != nil {
		ceiling.Fail("cassandra-ceiling: cannot connect to Cassandra at %s: %v", where, err)
	}
	defer session.Close()
	result := ceiling.Result{Program: "go/gocql", Concurrency: *remote.Concurrency, ConnectSeconds: connect.Seconds()}

	ceiling.Timed(result, *warmup, *digest, func() func(*ceiling.Counter) {
		var ids []gocql.UUID
		iter := session.Query("SELECT " + quote(*idCol) + " FROM " + table(*metaTable)).PageSize(5000).Iter()
		var id gocql.UUID
		for iter.Scan(&id) {
			ids = append(ids, id)
		}
		if err := iter.Close(); err != nil {
			ceiling.Fail("cassandra-ceiling: listing ids of %s at %s failed: %v", *metaTable, where, err)
		}
		query := "SELECT " + quote(*dataCol) + " FROM " + table(*dataTable) + " WHERE " + quote(*idCol) + " = ?"
		return func(count *ceiling.Counter) {
			ceiling.Run("cassandra-ceiling", *dataTable+" at "+where, ids, *remote.Concurrency, func(id gocql.UUID) error {
				iter := session.Query(query, id).Iter() // gocql prepares the statement once and reuses it
				var data []byte
				for iter.Scan(&data) {
					count.Add(1, int64(len(data)), int64(len(data)))
					if count.Digests != nil { // the -digest pass only: no key string in the timed one
						count.Digest(id.String(), data)
					}
				}
				return iter.Close()
			})
		}
	})
}
