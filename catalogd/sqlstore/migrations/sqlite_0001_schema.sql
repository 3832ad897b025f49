-- The catalog schema. STRICT tables make SQLite reject a value of the wrong
-- type instead of storing it.
--
-- name_key and code_key hold catalog.SearchKey of name and code, computed in
-- Go (SQLite's lower() folds only ASCII). Prefix search is a range scan on
-- them: key >= prefix AND key < successor(prefix), BINARY collation (byte
-- order), so the indexes below serve it without LIKE.
--
-- Times are Unix microseconds, UTC: integers sort and compare exactly, and
-- microseconds are what PostgreSQL's timestamptz keeps, so both stores
-- return the same values.
CREATE TABLE products (
	id          INTEGER PRIMARY KEY,
	code        TEXT    NOT NULL UNIQUE,
	code_key    TEXT    NOT NULL,
	name        TEXT    NOT NULL,
	name_key    TEXT    NOT NULL,
	category    TEXT    NOT NULL,
	price_cents INTEGER NOT NULL CHECK (price_cents >= 0),
	status      TEXT    NOT NULL CHECK (status IN ('active', 'hidden', 'discontinued')),
	version     INTEGER NOT NULL,
	updated_at  INTEGER NOT NULL
) STRICT;

CREATE TABLE stock (
	product_id INTEGER PRIMARY KEY REFERENCES products (id),
	available  INTEGER NOT NULL CHECK (available >= 0),
	version    INTEGER NOT NULL,
	updated_at INTEGER NOT NULL
) STRICT;

-- Lists and search only show active products, so every index is partial:
-- smaller, and a query that says status = 'active' (a literal, as the
-- store's queries do) can use it. id is the rowid, which every SQLite index
-- ends with implicitly, so (name_key) is ordered by (name_key, id) and serves
-- ORDER BY name_key, id both ways.
CREATE INDEX products_active_name         ON products (name_key)              WHERE status = 'active';
CREATE INDEX products_active_price        ON products (price_cents)           WHERE status = 'active';
CREATE INDEX products_active_updated      ON products (updated_at)            WHERE status = 'active';
CREATE INDEX products_active_cat_name     ON products (category, name_key)    WHERE status = 'active';
CREATE INDEX products_active_cat_price    ON products (category, price_cents) WHERE status = 'active';
CREATE INDEX products_active_cat_updated  ON products (category, updated_at)  WHERE status = 'active';
CREATE INDEX products_active_code         ON products (code_key)              WHERE status = 'active';
