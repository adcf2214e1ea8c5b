package policy

// Thresholds are the settings of cache_aware's routing rule in force: the
// cache threshold and the balance thresholds, absolute and relative. A
// router serving many models may set them per model; this says which hold.
func (c *CacheAware) Thresholds() (cache float64, abs int, rel float64) {
	return c.threshold, c.absThreshold, c.relThreshold
}
