package catalog

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// The catalog the stores seed on first start: SeedSize products generated
// from DefaultSeed.
const DefaultSeed uint64 = 1

// SeedSize is untyped: it counts products and bounds int64 ids.
const SeedSize = 10_000

// SeedEpoch is the instant the generated catalog was "last updated" at the
// latest; every generated UpdatedAt is up to a year before it. It is fixed,
// not time.Now, so that the catalog is the same on every machine and tests
// can compute what a store must return.
var SeedEpoch = time.Date(2026, time.January, 1, 0, 0, 0, 0, time.UTC)

// SeedRow is one generated product and its initial stock.
type SeedRow struct {
	Product Product
	Stock   Stock
}

// category is a category slug with the nouns its products are named after
// and the price range, in cents, they are drawn from.
type category struct {
	slug     string
	nouns    []string
	min, max int64
}

var categories = []category{
	{"apparel", []string{"Jacket", "Hoodie", "T-Shirt", "Scarf", "Cap", "Sweater", "Raincoat"}, 999, 19999},
	{"audio", []string{"Headphones", "Speaker", "Earbuds", "Soundbar", "Turntable", "Microphone"}, 1999, 49999},
	{"beauty", []string{"Serum", "Lotion", "Brush Set", "Mirror", "Hair Dryer"}, 499, 9999},
	{"books", []string{"Notebook", "Cookbook", "Atlas", "Journal", "Sketchbook"}, 599, 5999},
	{"cameras", []string{"Camera", "Tripod", "Lens", "Camera Bag", "Flash"}, 2999, 199999},
	{"computers", []string{"Laptop", "Keyboard", "Mouse", "Monitor", "Webcam", "Docking Station"}, 1499, 249999},
	{"garden", []string{"Planter", "Hose", "Shovel", "Rake", "Watering Can", "Bird Feeder"}, 799, 14999},
	{"grocery", []string{"Coffee Beans", "Green Tea", "Olive Oil", "Honey", "Pasta", "Granola"}, 199, 4999},
	{"health", []string{"Thermometer", "Yoga Mat", "Massager", "Scale", "First Aid Kit"}, 999, 19999},
	{"home", []string{"Blanket", "Cushion", "Curtain", "Rug", "Vase", "Clock"}, 999, 39999},
	{"kitchen", []string{"Kettle", "Skillet", "Knife", "Blender", "Toaster", "Mug", "Cutting Board"}, 599, 29999},
	{"lighting", []string{"Desk Lamp", "Floor Lamp", "Lantern", "Bulb", "String Lights"}, 499, 24999},
	{"office", []string{"Desk", "Chair", "Stapler", "Pen", "Organizer", "Whiteboard"}, 199, 59999},
	{"outdoor", []string{"Tent", "Backpack", "Sleeping Bag", "Hammock", "Cooler", "Camp Stove"}, 1999, 59999},
	{"pets", []string{"Dog Bed", "Cat Tree", "Leash", "Feeder", "Pet Carrier"}, 699, 19999},
	{"phones", []string{"Phone Case", "Charger", "Power Bank", "Cable", "Screen Protector"}, 499, 9999},
	{"sports", []string{"Football", "Tennis Racket", "Dumbbell", "Bicycle Helmet", "Jump Rope"}, 799, 49999},
	{"tools", []string{"Drill", "Hammer", "Screwdriver Set", "Wrench", "Tape Measure", "Saw"}, 699, 39999},
	{"toys", []string{"Puzzle", "Building Blocks", "Kite", "Board Game", "Plush Bear", "Robot"}, 499, 14999},
	{"travel", []string{"Suitcase", "Travel Pillow", "Passport Holder", "Duffel Bag", "Luggage Tag"}, 599, 39999},
}

var adjectives = []string{
	"Classic", "Compact", "Deluxe", "Everyday", "Essential", "Ultra", "Smart",
	"Vintage", "Modern", "Rustic", "Premium", "Lightweight", "Heavy-Duty",
	"Portable", "Foldable", "Wireless", "Eco", "Mini", "Pro", "Quiet",
	"Bright", "Cozy", "Sleek", "Rugged", "Nordic", "Urban", "Coastal",
	"Alpine", "Golden", "Midnight",
}

var materials = []string{
	"", "", "", "Bamboo", "Steel", "Oak", "Linen", "Ceramic", "Leather",
	"Wool", "Cotton", "Glass", "Walnut", "Copper", "Canvas", "Carbon",
}

var colours = []string{
	"", "", "", "", "Black", "White", "Red", "Blue", "Green", "Grey",
	"Navy", "Olive", "Sand", "Teal",
}

// Generate returns n products with ids 1..n, codes "P000001".., names built
// from small word lists, categories from a fixed list of 20, prices drawn
// from each category's range, mostly active, with stock levels from 0 to
// 500 (about one in ten sold out). The same seed and n always give the same
// catalog: the random source is math/rand/v2's PCG, whose output is fixed by
// its specification, and no clock is read.
func Generate(seed uint64, n int) []SeedRow {
	rng := rand.New(rand.NewPCG(seed, 0x686f6c6466617374)) // "holdfast"
	rows := make([]SeedRow, n)
	for i := range rows {
		id := int64(i + 1)
		c := categories[rng.IntN(len(categories))]
		name := adjectives[rng.IntN(len(adjectives))]
		for _, w := range []string{colours[rng.IntN(len(colours))], materials[rng.IntN(len(materials))]} {
			if w != "" {
				name += " " + w
			}
		}
		name += " " + c.nouns[rng.IntN(len(c.nouns))]
		if rng.IntN(4) == 0 {
			name += fmt.Sprintf(" %d", 100+rng.IntN(900)) // a model number
		}
		// Prices end in 99 cents, as shops like them.
		price := (c.min+rng.Int64N(c.max-c.min+1))/100*100 + 99
		status := StatusActive
		switch r := rng.IntN(100); {
		case r < 4:
			status = StatusHidden
		case r < 8:
			status = StatusDiscontinued
		}
		updated := SeedEpoch.Add(-time.Duration(rng.Int64N(365*24*3600)) * time.Second)
		var avail int64
		if rng.IntN(10) != 0 {
			avail = 1 + rng.Int64N(500)
		}
		rows[i] = SeedRow{
			Product: Product{
				ID:         id,
				Code:       fmt.Sprintf("P%06d", id),
				Name:       name,
				Category:   c.slug,
				PriceCents: price,
				Status:     status,
				Version:    1,
				UpdatedAt:  updated,
			},
			Stock: Stock{ProductID: id, Available: avail, Version: 1, UpdatedAt: updated},
		}
	}
	return rows
}

// Categories returns the slugs of the generated catalog's categories, in
// alphabetical order.
func Categories() []string {
	s := make([]string, len(categories))
	for i, c := range categories {
		s[i] = c.slug
	}
	return s
}
