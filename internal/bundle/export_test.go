package bundle

// AnswersKept is how many answers b's cache holds, -1 when b keeps none.
func (b *Bundle) AnswersKept() int {
	if b.answers == nil {
		return -1
	}
	return b.answers.Len()
}
