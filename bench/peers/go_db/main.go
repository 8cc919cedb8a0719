// Command go_db is the Go peer of `xkbench compare db`: the arena entry's
// database routes (shared/arena/CONTRACT.md, "The database" and "The stacks")
// written as a Go service would write them, with net/http, pgx's pool and
// go-redis: GET /async-db?min&max&limit, GET /fortunes, GET /api/items/{id}
// (cache-aside through Redis at REDIS_URL, or from the database each time with
// CACHE=off), and GET /pipeline for the runner's readiness probe.
//
// Environment: PORT, DATABASE_URL, DATABASE_CONNECTIONS (pgx pool size,
// default 16: one query per connection at a time), REDIS_URL, CACHE. Run it
// with GOMAXPROCS=1, as the runner does.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"html"
	"log"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
)

type rating struct {
	Score int32 `json:"score"`
	Count int32 `json:"count"`
}

type item struct {
	ID       int32           `json:"id"`
	Name     string          `json:"name"`
	Category string          `json:"category"`
	Price    int32           `json:"price"`
	Quantity int32           `json:"quantity"`
	Active   bool            `json:"active"`
	Tags     json.RawMessage `json:"tags"`
	Rating   rating          `json:"rating"`
}

const itemColumns = "SELECT id, name, category, price, quantity, active, tags, rating_score, rating_count FROM items"

type server struct {
	db    *pgxpool.Pool
	cache *redis.Client // nil: no cache
}

func scanItem(row pgx.Row, it *item) error {
	var tags []byte
	err := row.Scan(&it.ID, &it.Name, &it.Category, &it.Price, &it.Quantity, &it.Active, &tags,
		&it.Rating.Score, &it.Rating.Count)
	it.Tags = json.RawMessage(tags)
	return err
}

func intParam(r *http.Request, name string, fallback int) int {
	if v, err := strconv.Atoi(r.URL.Query().Get(name)); err == nil {
		return v
	}
	return fallback
}

func (s *server) asyncDB(w http.ResponseWriter, r *http.Request) {
	low, high, limit := intParam(r, "min", 10), intParam(r, "max", 50), intParam(r, "limit", 50)
	limit = max(1, min(limit, 50))
	items := make([]item, 0, limit)
	rows, err := s.db.Query(r.Context(), itemColumns+" WHERE price BETWEEN $1 AND $2 LIMIT $3", low, high, limit)
	if err == nil {
		for rows.Next() {
			var it item
			if err = scanItem(rows, &it); err != nil {
				break
			}
			items = append(items, it)
		}
		rows.Close()
		if err == nil {
			err = rows.Err()
		}
	}
	w.Header().Set("Content-Type", "application/json")
	if err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte(`{"items":[],"count":0}`))
		return
	}
	json.NewEncoder(w).Encode(struct {
		Items []item `json:"items"`
		Count int    `json:"count"`
	}{items, len(items)})
}

type fortune struct {
	id      int32
	message string
}

func (s *server) fortunes(w http.ResponseWriter, r *http.Request) {
	rows, err := s.db.Query(r.Context(), "SELECT id, message FROM fortune")
	all := make([]fortune, 0, 256)
	if err == nil {
		for rows.Next() {
			var f fortune
			if err = rows.Scan(&f.id, &f.message); err != nil {
				break
			}
			all = append(all, f)
		}
		rows.Close()
	}
	if err != nil {
		http.Error(w, "database unavailable", http.StatusServiceUnavailable)
		return
	}
	all = append(all, fortune{0, "Additional fortune added at request time."})
	sort.Slice(all, func(i, j int) bool { return all[i].message < all[j].message })
	var b strings.Builder
	b.WriteString("<!DOCTYPE html><html><head><title>Fortunes</title></head><body><table><tr><th>id</th><th>message</th></tr>")
	for _, f := range all {
		b.WriteString("<tr><td>")
		b.WriteString(strconv.Itoa(int(f.id)))
		b.WriteString("</td><td>")
		b.WriteString(html.EscapeString(f.message))
		b.WriteString("</td></tr>")
	}
	b.WriteString("</table></body></html>")
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Write([]byte(b.String()))
}

func (s *server) loadItem(ctx context.Context, id int) ([]byte, error) {
	var it item
	err := scanItem(s.db.QueryRow(ctx, itemColumns+" WHERE id = $1", id), &it)
	if errors.Is(err, pgx.ErrNoRows) {
		return []byte{}, nil
	}
	if err != nil {
		return nil, err
	}
	return json.Marshal(it)
}

func (s *server) getItem(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.Atoi(r.PathValue("id"))
	if err != nil || id < 1 || id > 1<<31-1 {
		http.NotFound(w, r)
		return
	}
	key := "item:" + strconv.Itoa(id)
	state := "MISS"
	var body []byte
	if s.cache != nil {
		if cached, err := s.cache.Get(r.Context(), key).Bytes(); err == nil {
			body, state = cached, "HIT"
		}
	}
	if body == nil {
		if body, err = s.loadItem(r.Context(), id); err != nil {
			http.Error(w, "database unavailable", http.StatusServiceUnavailable)
			return
		}
		if s.cache != nil {
			s.cache.Set(r.Context(), key, body, time.Second)
		}
	}
	w.Header().Set("X-Cache", state)
	if len(body) == 0 {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(body)
}

func main() {
	ctx := context.Background()
	conf, err := pgxpool.ParseConfig(os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	conf.MaxConns = 16
	if n, err := strconv.Atoi(os.Getenv("DATABASE_CONNECTIONS")); err == nil && n > 0 {
		conf.MaxConns = int32(n)
	}
	conf.MinConns = conf.MaxConns
	db, err := pgxpool.NewWithConfig(ctx, conf)
	if err != nil {
		log.Fatal(err)
	}
	s := &server{db: db}
	if url := os.Getenv("REDIS_URL"); url != "" && os.Getenv("CACHE") != "off" {
		opts, err := redis.ParseURL(url)
		if err != nil {
			log.Fatal(err)
		}
		s.cache = redis.NewClient(opts)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /async-db", s.asyncDB)
	mux.HandleFunc("GET /fortunes", s.fortunes)
	mux.HandleFunc("GET /api/items/{id}", s.getItem)
	mux.HandleFunc("GET /pipeline", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) })
	log.Fatal(http.ListenAndServe("127.0.0.1:"+os.Getenv("PORT"), mux))
}
