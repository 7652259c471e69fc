"""acceltrace's own .atrace event files, .actr counter dumps and run directories holding both."""
