-- The catalog schema.
--
-- name_key and code_key hold catalog.SearchKey of name and code, computed in
-- Go: PostgreSQL's lower() depends on the database's locale, and the SQLite
-- store and the cache key must agree with it. Both columns are COLLATE "C",
-- so they compare byte by byte (code point order for UTF-8) whatever the
-- database's default collation. That gives the prefix search what a
-- text_pattern_ops index gives LIKE 'x%' — an index range scan,
-- key >= prefix AND key < successor(prefix), usable with bound parameters —
-- and, unlike a text_pattern_ops index, the same index also serves
-- ORDER BY name_key for the list sorted by name, so one index does both jobs.
-- The list order is then also the same in every database and in SQLite.
CREATE TABLE products (
	id          bigint      PRIMARY KEY,
	code        text        NOT NULL UNIQUE,
	code_key    text        COLLATE "C" NOT NULL,
	name        text        NOT NULL,
	name_key    text        COLLATE "C" NOT NULL,
	category    text        NOT NULL,
	price_cents bigint      NOT NULL CHECK (price_cents >= 0),
	status      text        NOT NULL CHECK (status IN ('active', 'hidden', 'discontinued')),
	version     bigint      NOT NULL,
	updated_at  timestamptz NOT NULL
);

CREATE TABLE stock (
	product_id bigint      PRIMARY KEY REFERENCES products (id),
	available  bigint      NOT NULL CHECK (available >= 0),
	version    bigint      NOT NULL,
	updated_at timestamptz NOT NULL
);

-- Lists and search only show active products, so every index is partial;
-- the store's queries say status = 'active' as a literal so the planner can
-- use them. Each ends with id, the tie-break of every order.
CREATE INDEX products_active_name        ON products (name_key, id)              WHERE status = 'active';
CREATE INDEX products_active_price       ON products (price_cents, id)           WHERE status = 'active';
CREATE INDEX products_active_updated     ON products (updated_at, id)            WHERE status = 'active';
CREATE INDEX products_active_cat_name    ON products (category, name_key, id)    WHERE status = 'active';
CREATE INDEX products_active_cat_price   ON products (category, price_cents, id) WHERE status = 'active';
CREATE INDEX products_active_cat_updated ON products (category, updated_at, id)  WHERE status = 'active';
CREATE INDEX products_active_code        ON products (code_key, id)              WHERE status = 'active';
