package scrape

import "time"

// DefaultLossHold is how long a blackhole stays traffic_lost after the last attempt lost there (the meter's,
// or a drop counter's growth where the meter cannot see). A client with a short connect timeout that retries
// every few minutes is dropped every time; between its attempts the reason must not fall back to
// no_traffic_seen, or every change restarts the alerts' for: and nothing ever fires. Fifteen minutes keeps
// the page up for any client that tries at least every 10 minutes, with room for a scrape interval and a
// connect timeout's retries, and still ends a page a quarter of an hour after the last client gave up
// (docs/rotation.md, "Loss hold").
const DefaultLossHold = 15 * time.Minute
