// Package scrape keeps the node's verdicts current and decides them: the API view's Services, EndpointSlices
// and Node, the health check node ports' answers, kube-proxy's health server and /configz, its rules as the
// kernel holds them, the node's addresses and the arrivals meter's counts. The node model (Model) takes each
// input as it changes and decides again only the Services whose inputs changed or whose time-driven change
// came; Gatherer.Gather is the same decision from scratch, every input read and every Service decided at once,
// which the model is held equal to. Both keep what one look cannot know alone (drop counter baselines, rule
// counter growth, kube-proxy ever seen, the /configz cache, arrival totals, when each destination was first
// found dropped) and, in the state file, what must survive a restart; they adapt all of it into
// verdict's evidence and publish a State that nobody changes afterwards: the collector package renders
// it. Nothing here writes to the node.
package scrape
