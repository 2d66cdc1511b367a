package statuswriter

// Records returns how many status write records w holds.
func (w *Writer) Records() int { return w.records() }
