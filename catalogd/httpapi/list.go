package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/holdfast-dev/holdfast/catalogd/catalog"
)

// listProducts serves GET /v1/products?category=&page=&size=&sort=, one page
// of active products. The query is normalized (catalog.ListQuery.Normalize)
// before it becomes the cache key, so "?page=1" and "" share an entry.
func (h *Handler) listProducts(w http.ResponseWriter, r *http.Request) {
	v, err := parseQuery(r, "category", "page", "size", "sort")
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	q, err := parseListQuery(v)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	res, err := h.list.Get(r.Context(), listKey(q), h.loadList)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	h.writeCached(w, res)
}

// parseQuery parses the request's query string strictly: a malformed one
// ("%zz", a ';' separator) or a parameter not in allowed is a 400. Go's
// URL.Query drops what it cannot parse, so "?category=%zz" would list every
// category and "?sort=name;DROP" the default order, each answering a
// question the client did not ask.
func parseQuery(r *http.Request, allowed ...string) (url.Values, error) {
	v, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, errorf(http.StatusBadRequest, codeInvalidQuery, "the query string is malformed: %v", err)
	}
	for name := range v {
		if !slices.Contains(allowed, name) {
			return nil, errorf(http.StatusBadRequest, codeInvalidQuery, "unknown query parameter %q; this endpoint takes %s", name, strings.Join(allowed, ", "))
		}
	}
	return v, nil
}

// single returns the one value of a query parameter; a repeated parameter
// is refused rather than silently taking one of its values.
func single(v url.Values, name string) (string, error) {
	switch vs := v[name]; len(vs) {
	case 0:
		return "", nil
	case 1:
		return vs[0], nil
	}
	return "", errorf(http.StatusBadRequest, codeInvalidQuery, "%s is given more than once", name)
}

func parseListQuery(v url.Values) (catalog.ListQuery, error) {
	var q catalog.ListQuery
	var err error
	if q.Category, err = single(v, "category"); err != nil {
		return q, err
	}
	var sort string
	if sort, err = single(v, "sort"); err != nil {
		return q, err
	}
	q.Sort = catalog.Sort(sort)
	for _, p := range []struct {
		name string
		dst  *int
	}{{"page", &q.Page}, {"size", &q.Size}} {
		s, err := single(v, p.name)
		if err != nil {
			return q, err
		}
		if s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return q, errorf(http.StatusBadRequest, codeInvalidQuery, "%s must be a positive integer", p.name)
		}
		*p.dst = n
	}
	q, err = q.Normalize()
	if err != nil {
		return q, errorf(http.StatusBadRequest, codeInvalidQuery, "%s", strings.TrimPrefix(err.Error(), catalog.ErrInvalid.Error()+": "))
	}
	return q, nil
}

func (h *Handler) listLoader(ctx context.Context, key string) ([]byte, error) {
	q, err := parseListKey(key)
	if err != nil {
		return nil, err
	}
	page, err := h.store.Products(ctx, q)
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(page)
	return append(b, '\n'), err
}

// searchResponse is the body of GET /v1/search.
type searchResponse struct {
	Prefix string            `json:"prefix"`
	Items  []catalog.Product `json:"items"`
}

// searchProducts serves GET /v1/search?q=, prefix autocomplete over product
// names and codes returning at most Config.SearchLimit active products. The
// cache key is the normalized prefix, escaped by searchKey (catalog.NormalizePrefix: leading space
// dropped, lower-cased, at most catalog.MaxPrefixLen runes) — the same
// normalization the store searches with, so "RED", " red" and "red" share
// one entry. Trailing space is kept, as the store keeps it: "red " asks for
// names with a word starting "red".
func (h *Handler) searchProducts(w http.ResponseWriter, r *http.Request) {
	v, err := parseQuery(r, "q")
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	raw, err := single(v, "q")
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	if len(raw) > MaxSearchQueryBytes {
		h.writeError(w, r, errorf(http.StatusBadRequest, codeQueryTooLong, "q is longer than %d bytes", MaxSearchQueryBytes))
		return
	}
	if n := utf8.RuneCountInString(strings.TrimLeftFunc(raw, unicode.IsSpace)); n > catalog.MaxPrefixLen {
		h.writeError(w, r, errorf(http.StatusBadRequest, codeQueryTooLong, "q is longer than %d characters", catalog.MaxPrefixLen))
		return
	}
	prefix, err := catalog.NormalizePrefix(raw)
	if err != nil {
		h.writeError(w, r, errorf(http.StatusBadRequest, codeInvalidQuery, "%s", strings.TrimPrefix(err.Error(), catalog.ErrInvalid.Error()+": ")))
		return
	}
	res, err := h.search.Get(r.Context(), searchKey(prefix), h.loadSearch)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	h.writeCached(w, res)
}

func (h *Handler) searchLoader(ctx context.Context, key string) ([]byte, error) {
	prefix := searchPrefix(key)
	items, err := h.store.Search(ctx, prefix, h.searchLimit)
	if err != nil {
		return nil, err
	}
	if items == nil {
		items = []catalog.Product{}
	}
	b, err := json.Marshal(searchResponse{Prefix: prefix, Items: items})
	return append(b, '\n'), err
}
