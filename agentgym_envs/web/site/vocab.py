"""Word lists the shop world is generated from: categories, brands, models and prose.

Everything is a tuple, so iteration order is fixed and the world generator stays
deterministic for a seed. Each category has its own brands, model names, product
types, colours, sizes and price range, so generated names read like a real catalogue
("Trailrunner 2 Running Shoe" by Kestrel, "Voyager 28 Daypack" by Alpenfold).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CategorySpec:
    """How products of one category are named, sized and priced."""

    name: str
    brands: tuple[str, ...]
    models: tuple[str, ...]
    kinds: tuple[str, ...]
    colors: tuple[str, ...]
    sizes: tuple[str, ...]
    price_range: tuple[int, int]  # whole dollars, inclusive
    features: tuple[str, ...]


VERSIONS = ("", " 2", " 3", " Pro", " Lite", " X")

CATEGORIES: tuple[CategorySpec, ...] = (
    CategorySpec(
        name="Shoes",
        brands=("Kestrel", "Stridewell", "Northpeak", "Velora"),
        models=("Trailrunner", "Cloudstep", "Pacer", "Summit", "Glide", "Ridgeline",
                "Tempo", "Drift", "Canyon", "Swift"),
        kinds=("Running Shoe", "Trail Shoe", "Sneaker", "Hiking Boot"),
        colors=("Black", "White", "Navy", "Grey", "Red", "Olive"),
        sizes=("38", "39", "40", "41", "42", "43", "44", "45", "46"),
        price_range=(45, 180),
        features=("a breathable mesh upper", "a cushioned foam midsole",
                  "a grippy rubber outsole", "reflective heel details",
                  "a padded collar", "a water-resistant finish"),
    ),
    CategorySpec(
        name="Jackets",
        brands=("Alpenfold", "Harbor & Pine", "Stormline", "Kestrel"),
        models=("Voyager", "Nimbus", "Harbor", "Tundra", "Aurora", "Breaker",
                "Cascade", "Fjord", "Timberline", "Squall"),
        kinds=("Rain Jacket", "Down Jacket", "Fleece Jacket", "Softshell Jacket"),
        colors=("Black", "Navy", "Forest Green", "Mustard", "Charcoal", "Burgundy"),
        sizes=("XS", "S", "M", "L", "XL", "XXL"),
        price_range=(60, 320),
        features=("a fully taped waterproof shell", "an adjustable hood",
                  "zippered hand pockets", "recycled insulation",
                  "a packable design", "pit zips for ventilation"),
    ),
    CategorySpec(
        name="Backpacks",
        brands=("Alpenfold", "Roamwell", "Cairn Supply", "Urbanist"),
        models=("Voyager", "Commuter", "Basecamp", "Metro", "Rambler", "Scout",
                "Transit", "Daybreak", "Nomad", "Pathfinder"),
        kinds=("Daypack", "Travel Pack", "Laptop Backpack", "Hiking Pack"),
        colors=("Black", "Slate", "Sand", "Teal", "Rust", "Olive"),
        sizes=("18 L", "24 L", "28 L", "35 L", "45 L"),
        price_range=(35, 220),
        features=("a padded laptop sleeve", "a ventilated back panel",
                  "water bottle side pockets", "a weatherproof base",
                  "lockable zips", "a removable hip belt"),
    ),
    CategorySpec(
        name="Headphones",
        brands=("Sonique", "Auralis", "Beatline", "Quietwave"),
        models=("Echo", "Pulse", "Studio", "Halo", "Orbit", "Resonance", "Vibe",
                "Cadence", "Serenity", "Wave"),
        kinds=("Over-Ear Headphones", "Wireless Earbuds", "On-Ear Headphones",
               "Noise-Cancelling Headphones"),
        colors=("Black", "White", "Silver", "Midnight Blue", "Rose"),
        sizes=("Standard",),
        price_range=(25, 400),
        features=("active noise cancellation", "a 30-hour battery",
                  "multipoint Bluetooth pairing", "memory foam ear cushions",
                  "a built-in microphone", "a foldable travel design"),
    ),
    CategorySpec(
        name="Lamps",
        brands=("Lumora", "Brightside", "Nordlicht", "Hearthlight"),
        models=("Arc", "Beacon", "Lantern", "Luna", "Solstice", "Ember", "Prism",
                "Halcyon", "Dusk", "Glow"),
        kinds=("Desk Lamp", "Floor Lamp", "Table Lamp", "Reading Light"),
        colors=("Matte Black", "Brass", "White", "Oak", "Sage"),
        sizes=("Small", "Medium", "Large"),
        price_range=(20, 260),
        features=("a dimmable LED", "an adjustable arm", "a weighted base",
                  "a linen shade", "a USB charging port", "warm-to-cool colour control"),
    ),
    CategorySpec(
        name="Mugs",
        brands=("Kilnworks", "Morning Ritual", "Stoneware Co.", "Brewhaus"),
        models=("Classic", "Camp", "Diner", "Nordic", "Speckle", "Harbor", "Atelier",
                "Sunrise", "Fireside", "Pebble"),
        kinds=("Mug", "Travel Mug", "Espresso Cup", "Tumbler"),
        colors=("White", "Speckled Grey", "Cobalt", "Terracotta", "Black", "Mint"),
        sizes=("250 ml", "350 ml", "450 ml"),
        price_range=(8, 45),
        features=("dishwasher-safe glaze", "a double-walled body", "a leak-proof lid",
                  "a comfortable wide handle", "microwave-safe stoneware",
                  "a hand-thrown finish"),
    ),
)  # fmt: skip

DESCRIPTION_OPENERS = (
    "Built for everyday use, the {name} from {brand} pairs {f1} with {f2}.",
    "The {brand} {name} combines {f1} and {f2}.",
    "Meet the {name}: {brand} gave it {f1} and {f2}.",
)
DESCRIPTION_CLOSERS = (
    "It is covered by a two-year warranty.",
    "Free returns within 30 days.",
    "Customers love it as a gift.",
    "Designed and tested by the {brand} team.",
    "",
)

CUSTOMER_NAMES = (
    "Maya Patel", "Jonas Weber", "Ana Lopez", "Liam Chen", "Grace Okafor", "Hugo Martin",
    "Ines Silva", "Noah Kim", "Elena Rossi", "Farid Khan",
)  # fmt: skip
REVIEWER_NAMES = (
    "Sam R.", "Priya K.", "Tom B.", "Lucia G.", "Kenji T.", "Olga N.", "Ben W.",
    "Carla M.", "Dev S.", "Rosa P.", "Yusuf A.", "Zoe H.", "Marco D.", "Ivy L.",
)  # fmt: skip
REVIEW_TEXTS: dict[int, tuple[tuple[str, str], ...]] = {
    1: (("Disappointed", "Broke within a week and support was slow to answer."),
        ("Not as described", "The colour and fit were nothing like the photos.")),
    2: (("Meh", "It works, but the quality feels cheap for the price."),
        ("Could be better", "Fine for a while, then the stitching started to fray.")),
    3: (("Decent", "Does the job. Nothing special, nothing wrong."),
        ("Okay for the price", "Reasonable value, though the finish is a bit rough.")),
    4: (("Very good", "Comfortable and well made. I would buy it again."),
        ("Happy with it", "Arrived quickly and works as promised.")),
    5: (("Excellent", "Best purchase this year, the quality is outstanding."),
        ("Love it", "Exactly what I wanted. Highly recommended.")),
}  # fmt: skip

STREETS = (
    "Maple Street", "Oak Avenue", "Cedar Lane", "Harbor Road", "Elm Drive", "Birch Way",
    "Lake View", "Hill Street", "Park Avenue", "River Road", "Mill Lane", "Station Road",
)  # fmt: skip
CITIES = (
    ("Portland", "97205", "USA"), ("Austin", "78701", "USA"), ("Denver", "80202", "USA"),
    ("Toronto", "M5V 2T6", "Canada"), ("Dublin", "D02 X285", "Ireland"),
    ("Berlin", "10115", "Germany"), ("Lyon", "69002", "France"),
    ("Melbourne", "3000", "Australia"),
)  # fmt: skip
CARD_BRANDS = ("Visa", "Mastercard", "Amex")
