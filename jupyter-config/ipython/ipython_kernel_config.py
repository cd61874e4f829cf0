# Installed by dist-notebook into <environment>/etc/ipython/ (pyproject's shared-data), where
# every IPython kernel of the environment reads it: the dist magics exist in a kernel before
# `%load_ext dist_notebook`, and each says to run that instead of IPython's "magic not found".
c = get_config()  # noqa: F821 (IPython's config loader defines it)
c.InteractiveShellApp.extra_extensions.append("dist_notebook.load_hint")
