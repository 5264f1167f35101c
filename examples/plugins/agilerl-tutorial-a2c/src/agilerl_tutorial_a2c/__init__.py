"""A2C for agilerl: a tutorial plugin that joins the gym plugin's ``single_agent`` paradigm (docs/gym.md)."""
