"""What the tests share: the services they run against and the cairn processes they start."""
