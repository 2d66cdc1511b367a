// Package lease runs the controller's leader-only work while this process holds a
// coordination.k8s.io Lease (Run), and fences that work's API writes (Fence,
// FencedConfig): no leader-only write is sent once renewDeadline has passed since the
// start of the last successful renewal, measured on the monotonic clock, and a follower
// takes over only leaseDuration after that renewal, so two leaders never write at once.
// On shutdown the work drains before the Lease is released, so a follower takes over at
// once, never beside a leader still writing (docs/design/architecture.md#start-up-and-shutdown).
package lease
