"""Results as stored: the trial's result document, the suite plan, history, and durable writes."""
