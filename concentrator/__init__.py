"""The stream concentrator: windows on Spark (to come) and the command line that runs it all."""
