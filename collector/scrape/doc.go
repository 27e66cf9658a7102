// Package scrape gathers one scrape's inputs and decides its verdicts: the API view's Services, EndpointSlices
// and Node, the health check node ports' answers, kube-proxy's health server and /configz, its rules as the
// kernel holds them, the node's addresses and the arrivals meter's counts, each read once, side by side,
// within the scrape's deadline (Gatherer.Gather). It keeps what one scrape cannot know alone across scrapes
// (drop counter baselines, rule counter growth, kube-proxy ever seen, the /configz cache, arrival totals,
// when each destination was first found dropped) and in the state file across restarts, adapts all of it
// into kubeview/verdict's evidence, and returns a State that nobody changes afterwards: the collector
// package renders it. It never writes to the node.
package scrape
