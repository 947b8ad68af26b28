"""The pools and templates of the knowledge-update test set, written for it.

An entity (a cluster, a service, a person, a project, a pricing plan, a client application, a team,
an office) has slots (the region of a cluster, the on-call owner of a service, the price of a
plan, ...). A scenario takes one (entity, slot) pair, states an old value as a fact, and later
notes the new value the way an agent writes it down ("We moved the staging cluster to
us-east-2."). Distractors state other slots of the same entity.

Template fields: ``{entity}`` (as written mid-sentence: "the staging cluster", "Dana Whitfield",
"project Falcon"), ``{Entity}`` (at the start of a sentence), ``{name}`` (the short name: "staging",
"Dana", "Falcon"), ``{value}`` (the slot's value), and in update notes ``{old}`` (the value it
replaces). ``facts`` state a value (old memories, distractors, corrections); ``updates`` are notes
of a change; ``now`` asks for the current value, ``past`` for the value at a moment given by a
filter, not by the text.
"""

from __future__ import annotations

from dataclasses import dataclass

Entity = dict[str, str]


@dataclass(frozen=True)
class Slot:
    """One attribute of an entity kind whose value changes over time."""

    name: str
    kind: str                 # the entity pool (``ENTITIES``)
    label: str                # what it is, for reports ("region of a cluster")
    values: tuple[str, ...]   # distinct values; ``ordered``: they only grow over time (versions)
    facts: tuple[str, ...]
    updates: tuple[str, ...]
    now: tuple[str, ...]
    past: tuple[str, ...]
    ordered: bool = False


# ---- entity pools ----------------------------------------------------------------------------

PEOPLE = (
    "Dana Whitfield", "Marcus Okafor", "Priya Raman", "Tomás Herrera", "Hannah Kowalski", "Oliver Brandt",
    "Grace Liu", "Daniel Mensah", "Chloe Dubois", "Ethan Park", "Sophie Lindqvist", "Liam O'Connell",
    "Amara Nwosu", "Nathan Greenberg", "Isabel Carvalho", "Kenji Watanabe", "Fatima Haddad", "Lucas Moreau",
    "Ingrid Solberg", "Rahul Mehta", "Zoe Papadopoulos", "Mateo Rossi", "Aisha Karimi", "Jonas Becker",
    "Leila Farouk", "Victor Novak", "Yuki Tanaka", "Gabriel Santos", "Nadia Petrova", "Samuel Adeyemi",
    "Clara Jensen", "Diego Alvarez", "Mei Chen", "Henrik Larsen", "Olivia Brennan", "Arjun Nair",
    "Beatriz Costa", "Felix Wagner", "Hana Yoshida", "Ibrahim Diallo", "Julia Schmidt", "Kofi Asante",
    "Laura Martínez", "Mikael Virtanen", "Noor Rahman", "Pablo Ortega", "Rosa Bianchi", "Stefan Horvat",
    "Tara Quinn", "Umar Siddiqui", "Vera Ivanova", "Wei Zhang", "Ximena Rojas", "Yara Haddadin",
    "Zain Malik", "Anouk de Vries", "Bruno Ferreira", "Carmen Vidal", "Dmitri Sokolov", "Elif Yilmaz",
    "Farah Aziz", "Gustavo Lima", "Helena Berg", "Idris Bello",
)

SERVICES = (
    "payments", "checkout", "search-indexer", "notifications", "auth", "billing", "ledger", "inventory",
    "recommendations", "user-profile", "email-dispatcher", "image-resizer", "geocoder", "pricing", "invoicing",
    "fraud-scoring", "feature-flags", "audit-log", "webhooks", "session-store", "rate-limiter", "reporting",
    "data-export", "bulk-import", "job-scheduler", "chat-gateway", "media-upload", "translation",
    "shipping-quotes", "loyalty-points", "catalog", "reviews", "coupons", "analytics-ingest", "tax-calculator",
    "identity-proxy", "sms-gateway", "pdf-renderer", "metrics-collector", "config-server", "subscriptions",
    "refunds", "onboarding", "search-api",
)

PROJECTS = (
    "Falcon", "Bluebird", "Orion", "Maple", "Granite", "Lighthouse", "Tidewater", "Kestrel", "Nightjar",
    "Basalt", "Juniper", "Cobalt", "Meridian", "Sequoia", "Halcyon", "Quartz", "Driftwood", "Ember", "Sparrow",
    "Tundra", "Marigold", "Obsidian", "Pelican", "Saffron", "Thistle", "Vanguard", "Willow", "Zephyr",
    "Aurora", "Cypress", "Ironwood", "Lantern", "Mistral", "Heron",
)

CLUSTERS = (
    "staging", "production", "QA", "sandbox", "canary", "analytics", "ML training", "CI", "load-test",
    "disaster-recovery", "edge", "batch", "preview", "demo", "integration", "perf", "GPU inference", "data lake",
    "observability", "search", "Kafka", "shared services", "build farm", "internal tools", "partner sandbox",
    "EU production", "US production", "APAC production", "dev", "hotfix",
)

PLAN_PRODUCTS = ("Nimbus", "Cirrus", "Lumen", "Trellis", "Vantage", "Mosaic", "Paperclip", "Kite")
PLAN_TIERS = ("Starter", "Pro", "Team", "Business")

CLIENTS = (
    ("Atlas", "desktop client"), ("Beacon", "iOS app"), ("Compass", "Android app"), ("Relay", "CLI"),
    ("Pulse", "Python SDK"), ("Harbor", "web client"), ("Vista", "browser extension"), ("Quill", "editor plugin"),
    ("Signal", "monitoring agent"), ("Ranger", "macOS app"), ("Tessera", "JavaScript SDK"),
    ("Prism", "Windows app"), ("Courier", "Go SDK"), ("Lodestar", "Terraform provider"),
    ("Waypoint", "Slack bot"), ("Nova", "iPad app"), ("Orbit", "VS Code extension"), ("Keystone", "Java SDK"),
    ("Ridge", "Android TV app"), ("Sable", "kiosk app"), ("Fathom", "Rust SDK"), ("Gantry", "Helm chart"),
    ("Meadow", "watchOS app"), ("Cinder", "Linux client"), ("Tally", "Excel add-in"), ("Ferry", "sync daemon"),
    ("Lattice", "React component library"), ("Bramble", "Ruby gem"), ("Kelp", "Flutter app"),
    ("Spindle", "C++ SDK"),
)

TEAMS = (
    "platform guild", "frontend guild", "data team", "SRE team", "mobile team", "security guild",
    "design crew", "QA team", "growth squad", "billing squad", "API guild", "accessibility working group",
    "architecture council", "release crew", "incident review board", "ML reading group", "infra team",
    "docs team", "support engineering team", "analytics team", "backend guild", "database guild",
    "performance working group", "hiring committee", "on-call review group", "localization team",
    "developer productivity team", "payments squad", "search squad", "privacy council",
)

OFFICE_CITIES = (
    "Berlin", "Lisbon", "Amsterdam", "Toronto", "Austin", "Dublin", "Barcelona", "Warsaw", "Singapore",
    "Melbourne", "Denver", "Seattle", "Prague", "Copenhagen", "Montreal", "Edinburgh", "Munich", "Zurich",
    "Tallinn", "Vienna", "Stockholm", "Porto", "Valencia", "Boston", "Chicago", "Nairobi", "Cape Town",
    "Bangalore", "Tokyo", "Seoul",
)


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def _entity(entity: str, name: str) -> Entity:
    return {"entity": entity, "Entity": _cap(entity), "name": name}


ENTITIES: dict[str, tuple[Entity, ...]] = {
    "cluster": tuple(_entity(f"the {c} cluster", c) for c in CLUSTERS),
    "service": tuple(_entity(f"the {s} service", s) for s in SERVICES),
    "person": tuple(_entity(p, p.split()[0]) for p in PEOPLE),
    "project": tuple(_entity(f"project {p}", p) for p in PROJECTS),
    "plan": tuple(_entity(f"the {p} {t} plan", f"{p} {t}") for p in PLAN_PRODUCTS for t in PLAN_TIERS),
    "client": tuple(_entity(f"the {n} {kind}", n) for n, kind in CLIENTS),
    "team": tuple(_entity(f"the {t}", t) for t in TEAMS),
    "office": tuple(_entity(f"the {c} office", c) for c in OFFICE_CITIES),
}

# ---- value pools -----------------------------------------------------------------------------

REGIONS = (
    "us-east-1", "us-east-2", "us-west-1", "us-west-2", "eu-west-1", "eu-west-2", "eu-west-3", "eu-central-1",
    "eu-north-1", "eu-south-1", "ap-southeast-1", "ap-southeast-2", "ap-northeast-1", "ap-northeast-2",
    "ap-south-1", "ca-central-1", "sa-east-1", "me-south-1", "af-south-1",
)
KUBERNETES = tuple(f"1.{m}" for m in range(22, 32))
NODES = ("3 nodes", "4 nodes", "6 nodes", "8 nodes", "10 nodes", "12 nodes", "16 nodes", "20 nodes", "24 nodes",
         "32 nodes", "48 nodes", "64 nodes")
DATABASES = (
    "PostgreSQL 15", "PostgreSQL 16", "MySQL 8.0", "Aurora PostgreSQL", "CockroachDB", "DynamoDB", "MongoDB 7",
    "Cassandra", "ClickHouse", "Redis", "SQLite", "Cloud Spanner", "TiDB", "ScyllaDB", "MariaDB", "FoundationDB",
)
TIMEOUTS = ("250 milliseconds", "500 milliseconds", "800 milliseconds", "2 seconds", "5 seconds", "10 seconds",
            "15 seconds", "30 seconds", "45 seconds", "60 seconds", "90 seconds", "2 minutes")
RATE_LIMITS = tuple(f"{n} requests per second" for n in (50, 100, 200, 250, 400, 500, 750, 1000, 1500, 2000,
                                                          3000, 5000))
RUNTIMES = ("Python 3.9", "Python 3.10", "Python 3.11", "Python 3.12", "Go 1.21", "Go 1.22", "Java 17", "Java 21",
            "Node.js 18", "Node.js 20", "Rust 1.75", ".NET 8", "Kotlin 1.9", "Ruby 3.3")
PORTS = ("3000", "4000", "5000", "7000", "8000", "8080", "8081", "8443", "9000", "9090", "9443", "50051")
CITIES = (
    "Lisbon", "Berlin", "Amsterdam", "Toronto", "Austin", "Dublin", "Barcelona", "Warsaw", "Singapore", "Melbourne",
    "Denver", "Seattle", "Prague", "Copenhagen", "Montreal", "Edinburgh", "Munich", "Zurich", "Tallinn", "Vienna",
    "Stockholm", "Porto", "Valencia", "Boston", "Chicago", "Nairobi", "Cape Town", "Bangalore", "Tokyo", "Seoul",
)
TEAM_NAMES = ("Search", "Payments", "Growth", "Data Platform", "Mobile", "Infrastructure", "Security", "Billing",
              "Identity", "Developer Experience", "Observability", "ML Platform", "Frontend", "Support Tools")
ROLES = ("staff engineer", "senior engineer", "engineering manager", "product manager", "tech lead",
         "senior designer", "site reliability engineer", "data scientist", "principal engineer", "QA lead",
         "solutions architect", "developer advocate", "director of engineering")
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December")
LAUNCH_DATES = tuple(f"{MONTHS[m]} {d}" for m in range(12) for d in (3, 9, 14, 21, 28))
BUDGETS = ("$60k", "$80k", "$95k", "$120k", "$150k", "$180k", "$200k", "$250k", "$320k", "$400k", "$550k",
           "$750k", "$1.2M")
PRICES = tuple(f"${n} per user per month" for n in (5, 8, 10, 12, 15, 19, 24, 29, 39, 49)) + tuple(
    f"${n} per month" for n in (9, 14, 25, 35, 59, 79, 99, 149, 199, 299))
STORAGE = ("5 GB", "10 GB", "25 GB", "50 GB", "100 GB", "250 GB", "500 GB", "1 TB", "2 TB", "5 TB")
SEATS = ("3 seats", "5 seats", "10 seats", "15 seats", "25 seats", "50 seats", "100 seats", "250 seats")
# client versions: v{major}.{minor}.{patch}, ordered by their numbers (see ``version_key``)
VERSIONS = tuple(f"v{a}.{b}.{c}" for a in range(1, 5) for b in range(0, 13, 3) for c in (0, 2))
BUILD_TOOLS = ("Gradle", "Bazel", "Vite", "webpack", "esbuild", "Xcode Cloud", "Fastlane", "CMake", "Maven",
               "Buck2", "Turborepo", "Nx", "Poetry", "Cargo")
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday")
STANDUP_TIMES = ("8:45", "9:00", "9:15", "9:30", "9:45", "10:00", "10:30", "11:00", "13:30", "14:00", "16:00")
ADDRESSES = ("14 Linden Street", "3 Harbour Road", "220 Mill Lane", "57 Orchard Avenue", "9 Quay Street",
             "101 Station Square", "42 Foundry Row", "18 Canal Walk", "77 Market Place", "5 Observatory Hill",
             "31 Tannery Yard", "64 Ropewalk", "12 Copper Court", "88 Weaver Street", "260 Riverside Drive",
             "7 Chapel Lane", "150 Granary Wharf", "23 Bell Street")
DESKS = ("12 desks", "20 desks", "24 desks", "30 desks", "40 desks", "55 desks", "60 desks", "80 desks",
         "120 desks", "150 desks")


def version_key(value: str) -> tuple[int, ...]:
    """Sort key of the ordered values: the numbers in them (1.29 < 1.31, v1.9.2 < v1.12.0)."""
    digits = "".join(c if c.isdigit() else " " for c in value)
    return tuple(int(x) for x in digits.split())


# ---- slots -----------------------------------------------------------------------------------

SLOTS: tuple[Slot, ...] = (
    Slot("cluster_region", "cluster", "region of a cluster", REGIONS,
         facts=("{Entity} runs in {value}.", "{Entity} is deployed in the {value} region.",
                "Infra note: {entity} lives in AWS {value}."),
         updates=("We moved {entity} to {value}.", "Migration done: {entity} now runs in {value} instead of {old}.",
                  "{Entity} was moved from {old} to {value} this week.", "Heads-up: {name} is in {value} now."),
         now=("Which region is {entity} in?", "Where does {entity} run?", "{name} cluster region?"),
         past=("Which region was {entity} in at the time?", "Where was {entity} running back then?")),
    Slot("cluster_kubernetes", "cluster", "Kubernetes version of a cluster", KUBERNETES, ordered=True,
         facts=("{Entity} runs Kubernetes {value}.", "Kubernetes version on {entity}: {value}.",
                "{Entity} is on Kubernetes {value}."),
         updates=("Upgraded {entity} to Kubernetes {value}.", "{Entity} is now on Kubernetes {value} (was {old}).",
                  "Finished the {name} cluster upgrade from {old} to {value}.",
                  "K8s bump done: {name} runs {value} now."),
         now=("What Kubernetes version does {entity} run?", "Which k8s version is {entity} on?",
              "{name} cluster Kubernetes version"),
         past=("Which Kubernetes version was {entity} on then?", "What k8s version did {entity} run at that point?")),
    Slot("cluster_nodes", "cluster", "node count of a cluster", NODES,
         facts=("{Entity} has {value}.", "{Entity} is sized at {value}.", "Capacity: {entity} runs on {value}."),
         updates=("Scaled {entity} to {value}.", "{Entity} now has {value}, changed from {old}.",
                  "Resized the {name} cluster from {old} to {value}.",
                  "{Entity} runs on {value} now after the resize."),
         now=("How many nodes does {entity} have?", "What size is {entity}?", "{name} cluster node count"),
         past=("How many nodes did {entity} have then?", "What was the size of {entity} at that point?")),
    Slot("service_oncall", "service", "on-call owner of a service", PEOPLE,
         facts=("{value} is the on-call owner of {entity}.", "On-call for {entity}: {value}.",
                "Page {value} when {entity} breaks."),
         updates=("{value} took over on-call for {entity}.", "On-call for {entity} moved from {old} to {value}.",
                  "{value} is now on call for {name}; {old} rotated off.",
                  "Handover done: {entity} pages {value} now."),
         now=("Who is on call for {entity}?", "Who do I page when {entity} is down?", "{name} on-call owner"),
         past=("Who was on call for {entity} then?", "Who owned on-call for {entity} at that time?")),
    Slot("service_database", "service", "database of a service", DATABASES,
         facts=("{Entity} stores its data in {value}.", "{Entity} uses {value} as its database.",
                "Backing store of {entity}: {value}."),
         updates=("We migrated {entity} from {old} to {value}.", "{Entity} now runs on {value}.",
                  "Cut over {name} to {value} last night.", "{Entity} switched its database to {value}."),
         now=("Which database does {entity} use?", "What does {entity} store its data in?",
              "{name} service database"),
         past=("Which database did {entity} use back then?", "What was {entity} storing its data in at that point?")),
    Slot("service_timeout", "service", "request timeout of a service", TIMEOUTS,
         facts=("{Entity} has a request timeout of {value}.", "Timeout for calls to {entity}: {value}.",
                "Calls to {entity} time out after {value}."),
         updates=("Changed the {name} timeout to {value}.", "{Entity} now times out after {value} instead of {old}.",
                  "Set the request timeout of {entity} from {old} to {value}.", "Timeout on {entity} is {value} now."),
         now=("What is the request timeout of {entity}?", "After how long do calls to {entity} time out?",
              "{name} timeout"),
         past=("What was the timeout of {entity} then?", "How long did calls to {entity} take to time out back then?")),
    Slot("service_rate_limit", "service", "rate limit of a service", RATE_LIMITS,
         facts=("{Entity} is rate limited to {value}.", "Rate limit of {entity}: {value}.",
                "{Entity} accepts at most {value}."),
         updates=("Changed the {name} rate limit to {value}.", "{Entity} now allows {value} (was {old}).",
                  "New rate limit on {entity}: {value}.", "We changed the throttle on {entity} from {old} to {value}."),
         now=("What is the rate limit of {entity}?", "How many requests per second does {entity} accept?",
              "{name} rate limit"),
         past=("What rate limit did {entity} have then?", "How much traffic did {entity} accept at that point?")),
    Slot("service_runtime", "service", "language runtime of a service", RUNTIMES,
         facts=("{Entity} runs on {value}.", "Runtime of {entity}: {value}.", "{Entity} is built with {value}."),
         updates=("Ported {entity} to {value}.", "{Entity} runs on {value} now, not {old}.",
                  "Finished moving {name} from {old} to {value}.", "{Entity} was upgraded to {value}."),
         now=("Which runtime does {entity} use?", "What language version is {entity} on?", "{name} service runtime"),
         past=("What runtime was {entity} on back then?", "Which language version did {entity} use at that time?")),
    Slot("service_port", "service", "port of a service", PORTS,
         facts=("{Entity} listens on port {value}.", "Port of {entity}: {value}.",
                "{Entity} serves traffic on port {value}."),
         updates=("Moved {entity} to port {value}.", "{Entity} listens on {value} now instead of {old}.",
                  "Changed the {name} port from {old} to {value}.", "Port change: {name} is on {value} now."),
         now=("Which port does {entity} listen on?", "What port is {entity} on?", "{name} service port"),
         past=("Which port was {entity} on then?", "What port did {entity} listen on at that point?")),
    Slot("person_city", "person", "office city of a person", CITIES,
         facts=("{Entity} works from the {value} office.", "{Entity} is based in {value}.",
                "{name} lives and works in {value}."),
         updates=("{name} now works from {value}.", "{Entity} relocated from {old} to {value}.",
                  "{name} moved to {value}; update the travel list.", "{Entity} is based in {value} now."),
         now=("Which city does {entity} work from?", "Where is {entity} based?", "where does {name} work from"),
         past=("Where was {entity} based at the time?", "Which city did {entity} work from then?")),
    Slot("person_team", "person", "team of a person", TEAM_NAMES,
         facts=("{Entity} is on the {value} team.", "{Entity} works in the {value} team.",
                "{name} belongs to the {value} team."),
         updates=("{name} moved to the {value} team.", "{Entity} switched from the {old} team to the {value} team.",
                  "{name} joined the {value} team this month.", "{Entity} is on the {value} team now."),
         now=("Which team is {entity} on?", "What team does {entity} work in?", "{name}'s team"),
         past=("Which team was {entity} on then?", "What team was {entity} in at that point?")),
    Slot("person_manager", "person", "manager of a person", PEOPLE,
         facts=("{Entity} reports to {value}.", "{Entity}'s manager is {value}.", "{value} manages {entity}."),
         updates=("{name} reports to {value} now.", "{Entity}'s manager changed from {old} to {value}.",
                  "Reorg: {name} moved under {value}.", "{value} is {name}'s new manager."),
         now=("Who is {entity}'s manager?", "Who does {entity} report to?", "{name}'s manager"),
         past=("Who did {entity} report to then?", "Who was {entity}'s manager at the time?")),
    Slot("person_role", "person", "job title of a person", ROLES,
         facts=("{Entity}'s role: {value}.", "{Entity} holds the {value} title.", "Title of {entity}: {value}."),
         updates=("{name}'s title changed to {value}.", "{Entity} moved from {old} to {value}.",
                  "{name} now holds the {value} role.", "New role for {name}: {value} (was {old})."),
         now=("What is {entity}'s role?", "What is {entity}'s job title?", "{name}'s title"),
         past=("What was {entity}'s role then?", "Which title did {entity} have at that point?")),
    Slot("project_database", "project", "database of a project", DATABASES,
         facts=("{Entity} uses {value} as its database.", "Database for {entity}: {value}.",
                "{Entity} keeps its data in {value}."),
         updates=("{Entity} switched to {value}.", "We moved {entity} off {old} onto {value}.",
                  "{name} now runs on {value}.", "Decision: {entity} will use {value} from now on."),
         now=("Which database does {entity} use?", "What database is {entity} built on?", "{name} database"),
         past=("Which database did {entity} use then?", "What database was {entity} on at that point?")),
    Slot("project_lead", "project", "tech lead of a project", PEOPLE,
         facts=("{value} leads {entity}.", "Tech lead of {entity}: {value}.", "{Entity} is led by {value}."),
         updates=("{value} took over {entity} as tech lead.", "{Entity} has a new lead: {value} replaces {old}.",
                  "{value} leads {name} now.", "Handover: {name} is led by {value} from today."),
         now=("Who leads {entity}?", "Who is the tech lead of {entity}?", "{name} tech lead"),
         past=("Who led {entity} then?", "Who was the tech lead of {entity} at that point?")),
    Slot("project_launch", "project", "launch date of a project", LAUNCH_DATES,
         facts=("{Entity} launches on {value}.", "Launch date of {entity}: {value}.",
                "{Entity} is scheduled to ship on {value}."),
         updates=("{Entity} launch moved to {value}.", "New launch date for {name}: {value} (was {old}).",
                  "{Entity} was rescheduled from {old} to {value}.", "{name} now ships on {value}."),
         now=("When does {entity} launch?", "What is the launch date of {entity}?", "{name} launch date"),
         past=("When was {entity} supposed to launch then?", "What launch date did {entity} have at that point?")),
    Slot("project_budget", "project", "budget of a project", BUDGETS,
         facts=("{Entity} has a budget of {value}.", "Budget for {entity}: {value}.",
                "{Entity} is funded with {value}."),
         updates=("{Entity} budget changed to {value}.",
                  "Finance approved {value} for {name}, replacing the {old} budget.",
                  "New budget for {entity}: {value}.", "{name} budget is {value} now (was {old})."),
         now=("What is the budget of {entity}?", "How much money does {entity} have?", "{name} budget"),
         past=("What was the budget of {entity} then?", "How much money did {entity} have at that point?")),
    Slot("plan_price", "plan", "price of a pricing plan", PRICES,
         facts=("{Entity} costs {value}.", "Price of {entity}: {value}.", "{Entity} is priced at {value}."),
         updates=("{Entity} now costs {value}.", "We repriced {entity} from {old} to {value}.",
                  "Pricing change: {name} is {value} now.", "New price for {entity}: {value}."),
         now=("How much does {entity} cost?", "What is the price of {entity}?", "{name} price"),
         past=("How much did {entity} cost then?", "What was the price of {entity} at that point?")),
    Slot("plan_storage", "plan", "storage quota of a pricing plan", STORAGE,
         facts=("{Entity} includes {value} of storage.", "Storage quota of {entity}: {value}.",
                "{Entity} comes with {value} storage."),
         updates=("{Entity} now includes {value} of storage.", "Storage on {entity} changed from {old} to {value}.",
                  "{name} storage quota is {value} now.", "New storage allowance for {entity}: {value}."),
         now=("How much storage does {entity} include?", "What is the storage quota of {entity}?", "{name} storage"),
         past=("How much storage did {entity} include then?", "What was the storage quota of {entity} at that point?")),
    Slot("plan_seats", "plan", "seat limit of a pricing plan", SEATS,
         facts=("{Entity} allows {value}.", "Seat limit of {entity}: {value}.", "{Entity} is capped at {value}."),
         updates=("{Entity} now allows {value}.", "Seat limit on {entity} changed from {old} to {value}.",
                  "{name} is capped at {value} now.", "New seat cap for {entity}: {value}."),
         now=("How many seats does {entity} allow?", "What is the seat limit of {entity}?", "{name} seat limit"),
         past=("How many seats did {entity} allow then?", "What was the seat limit of {entity} at that point?")),
    Slot("client_version", "client", "release version of a client", VERSIONS, ordered=True,
         facts=("The current release of {entity} is {value}.", "{Entity} is at version {value}.",
                "Latest {name} release: {value}."),
         updates=("Shipped {entity} {value}.", "{Entity} {value} is out, replacing {old}.",
                  "Released {name} {value} today.", "{Entity} is on {value} now."),
         now=("What is the latest release of {entity}?", "Which version of {entity} is current?",
              "{name} latest version"),
         past=("What was the latest release of {entity} then?",
               "Which version of {entity} was current at that point?")),
    Slot("client_owner", "client", "release manager of a client", PEOPLE,
         facts=("{value} owns releases of {entity}.", "Release manager for {entity}: {value}.",
                "{value} signs off on {entity} releases."),
         updates=("{value} took over {entity} releases.", "Release manager of {name} changed from {old} to {value}.",
                  "{value} owns {name} releases now.", "Handover: {entity} releases go through {value} from now on."),
         now=("Who manages releases of {entity}?", "Who owns the {name} release?", "{name} release manager"),
         past=("Who managed releases of {entity} then?", "Who owned {entity} releases at that point?")),
    Slot("client_build", "client", "build tool of a client", BUILD_TOOLS,
         facts=("{Entity} is built with {value}.", "Build tool of {entity}: {value}.", "{Entity} builds use {value}."),
         updates=("Moved the {name} build to {value}.", "{Entity} builds with {value} now, not {old}.",
                  "We replaced {old} with {value} for {entity}.", "{name} build runs on {value} now."),
         now=("What build tool does {entity} use?", "How is {entity} built?", "{name} build tool"),
         past=("What build tool did {entity} use then?", "How was {entity} built at that point?")),
    Slot("team_meeting_day", "team", "meeting day of a team", WEEKDAYS,
         facts=("{Entity} meets on {value}s.", "Meeting day of {entity}: {value}.",
                "The weekly {name} sync is on {value}."),
         updates=("{Entity} meets on {value}s now.", "Moved the {name} meeting from {old} to {value}.",
                  "{Entity} switched its weekly meeting to {value}.",
                  "Heads-up: the {name} sync is on {value} from now on."),
         now=("Which day does {entity} meet?", "When is the weekly {name} meeting?", "{name} meeting day"),
         past=("Which day did {entity} meet then?", "When was the weekly {name} meeting at that point?")),
    Slot("team_standup", "team", "standup time of a team", STANDUP_TIMES,
         facts=("{Entity} holds standup at {value}.", "Daily standup of {entity}: {value}.",
                "{Entity} does its daily standup at {value}."),
         updates=("{Entity} standup moved to {value}.", "Standup for the {name} is at {value} now instead of {old}.",
                  "We shifted the {name} standup from {old} to {value}.",
                  "{Entity} meets for standup at {value} from now on."),
         now=("What time is the standup of {entity}?", "When does {entity} hold its daily standup?",
              "{name} standup time"),
         past=("What time was the standup of {entity} then?", "When did {entity} hold its standup at that point?")),
    Slot("team_lead", "team", "lead of a team", PEOPLE,
         facts=("{value} runs {entity}.", "Lead of {entity}: {value}.", "{Entity} is organised by {value}."),
         updates=("{value} took over {entity}.", "{Entity} is run by {value} now; {old} stepped back.",
                  "New lead for the {name}: {value}.", "{value} runs the {name} from this quarter."),
         now=("Who runs {entity}?", "Who leads {entity}?", "{name} lead"),
         past=("Who ran {entity} then?", "Who led {entity} at that point?")),
    Slot("office_manager", "office", "manager of an office", PEOPLE,
         facts=("{value} manages {entity}.", "Office manager in {name}: {value}.",
                "{value} is the contact person for {entity}."),
         updates=("{value} is the new manager of {entity}.", "{Entity} is managed by {value} now; {old} moved on.",
                  "Office manager in {name} changed from {old} to {value}.", "Ask {value} about {entity} from now on."),
         now=("Who manages {entity}?", "Who is the office manager in {name}?", "{name} office manager"),
         past=("Who managed {entity} then?", "Who was the office manager in {name} at that point?")),
    Slot("office_address", "office", "address of an office", ADDRESSES,
         facts=("{Entity} is at {value}.", "Address of {entity}: {value}.", "{Entity} is located at {value}."),
         updates=("{Entity} moved to {value}.", "New address for {entity}: {value} (was {old}).",
                  "The {name} team relocated from {old} to {value}.", "{Entity} is at {value} now."),
         now=("What is the address of {entity}?", "Where is {entity}?", "{name} office address"),
         past=("What was the address of {entity} then?", "Where was {entity} at that point?")),
    Slot("office_desks", "office", "desk count of an office", DESKS,
         facts=("{Entity} has {value}.", "Desk count in {entity}: {value}.", "{Entity} fits {value}."),
         updates=("{Entity} has {value} now.", "After the refit {entity} has {value}, not {old}.",
                  "Desk count in {name} changed from {old} to {value}.", "{Entity} was resized to {value}."),
         now=("How many desks does {entity} have?", "How big is {entity}?", "{name} office desk count"),
         past=("How many desks did {entity} have then?", "How big was {entity} at that point?")),
)

# A contradicting note states the new value as a correction of the old one; ``{fact}`` is one of
# the slot's facts with the new value, ``{source}`` where the agent read it.
CORRECTIONS = (
    "Correction: {fact}",
    "Correction to an earlier note that said {old}: {fact}",
    "Checked again, the earlier note was wrong. {fact}",
    "{fact} (Not {old} as noted before.)",
    "Per {source}: {fact}",
)
SOURCES = ("the wiki", "the status page", "the team channel", "the latest planning doc", "the admin console",
           "the staff directory", "the runbook")

# A note written some days after the change it records; ``{weekday}`` and ``{date}`` are the
# change's own (event) day, ``{days}`` how many whole days before the note it happened.
LATE = (
    "As of last {weekday}: {note}",
    "Forgot to note this {days} days ago: {note}",
    "Catching up on older notes: {note}",
    "Late entry (happened on {date}): {note}",
)

__all__ = ["CORRECTIONS", "ENTITIES", "LATE", "MONTHS", "SLOTS", "SOURCES", "Slot", "version_key"]
